"""Slurm integration: the node prolog, the task prolog, and the cluster-wide view under srun.

    (the command lines live in ddpdoctor/cli/prolog.py and ddpdoctor/cli/cluster.py)
    facts.py            the facts the prolog checks judge (a NetworkFacts aimed at the job's first node)
    config.py           the site configuration (/etc/ddpdoctor.toml)
    taskprolog.py       which interface variables a task should get
    cluster.py          probing, gathering through c10d's TCPStore, and the cluster view
    hostlist.py         Slurm hostlist expressions (python-hostlist)

Nothing here imports torch except cluster.py, and only inside the function that needs the store.
"""
