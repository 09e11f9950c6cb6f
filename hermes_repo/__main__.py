"""``python -m hermes_repo``: the ``hermes-repo`` command, for a venv whose scripts
folder is not on PATH."""

from hermes_repo.cli import main

if __name__ == "__main__":
    main(prog_name="hermes-repo")
