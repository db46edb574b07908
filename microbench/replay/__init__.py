"""Replay one training iteration's communication (schedule and communicator layout; the verb is to come)."""
