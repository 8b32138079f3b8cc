"""Tools for people working on ddpdoctor (not installed as a user command): scaffolds and generated docs.

    python -m ddpdoctor.dev new-check DD306 "title" --category nic [--tags network,prolog] [--module nic]
    python -m ddpdoctor.dev new-mode FAILURE_ID [--category nccl]
    python -m ddpdoctor.dev new-rule DL015 name ["title"]      (delegates to ddpdoctor.lint.new_rule)
    python -m ddpdoctor.dev new-command NAME [--no-checks]
    python -m ddpdoctor.dev generate-all [--check]

The guides docs/writing-a-check.md, writing-a-failure-mode.md and writing-a-command.md walk through
them; tests/test_dev_scaffold.py follows each guide in a scratch copy of the repository.
"""
