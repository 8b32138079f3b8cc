"""Slurm integration: the node prolog, the task prolog, and the cluster-wide view under srun.

    command.py          `ddpdoctor prolog` (Slurm Prolog=) and `ddpdoctor prolog --task` (TaskProlog=)
    cluster_command.py  `ddpdoctor cluster` (srun -N N --ntasks-per-node=1, or torchrun one process per node)
    facts.py            the facts the prolog checks judge (a NetworkFacts aimed at the job's first node)
    config.py           the site configuration (/etc/ddpdoctor.toml)
    taskprolog.py       which interface variables a task should get
    cluster.py          probing, gathering through c10d's TCPStore, and the cluster view
    hostlist.py         Slurm hostlist expressions (python-hostlist)

Nothing here imports torch except cluster.py, and only inside the function that needs the store.
"""
