"""Reading YAML safely, with the line of every value, and a cache of parsed files."""
