"""The environments: ``Rescue-v0``/``Rescue-v1`` (``replay``: a recorded conversation replayed as a decision
process), their flat SB3 variants (``wrappers``) and the PettingZoo multi-party view (``multiparty``)."""
