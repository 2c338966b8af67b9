"""`shipyard` subcommands: each module defines add_parser(subparsers) and sets a handler via set_defaults(func=...)."""
