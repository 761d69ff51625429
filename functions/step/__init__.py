"""The run state machine's tasks (Reserve, Advance) and the start function."""
