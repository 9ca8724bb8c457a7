"""Reading YAML with line numbers: the line reader, libyaml's events, limits."""
