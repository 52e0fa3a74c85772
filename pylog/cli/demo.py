"""``pylog demo``: placeholder until the storage issue's demo lands."""


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="run the end-to-end demonstration")
    parser.set_defaults(func=run)


def run(args) -> int:
    raise SystemExit("pylog demo: not built yet")
