"""Layer 11: the `shipyard` command: one module per subcommand in commands/."""
