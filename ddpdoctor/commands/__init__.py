"""One module per subcommand; each imports only what it needs."""
