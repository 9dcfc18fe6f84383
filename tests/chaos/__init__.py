"""The chaos suite: a mixed workload against a real cluster while faults are
injected, an independent checker of the recorded history, and fuzzers."""
