"""``python -m attnlab``: the same CLI as the ``attnlab`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
