"""Engine settings (what an operator may change) and the argv each engine is launched with."""
