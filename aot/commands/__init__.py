"""The work of the `aot` commands (verify, bench, inspect, report, quantize, ops ...), each in a
module of its own; aot/cli.py parses their options and calls them."""
