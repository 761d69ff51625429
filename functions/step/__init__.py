"""The run state machine's task (Advance, one slice per execution) and the start function."""
