"""The environments, one module each: the replays ``Rescue-v0`` (``replay``) and ``Rescue-v1`` (``replay_v1``: the
group objective on the outcome model F's predicted next state), the closed loop ``RescueSim-v0`` (``sim``: the
state moves by F with the support chosen), their flat SB3 variants (``wrappers``), and the PettingZoo multi-party
views of the replay (``multiparty``) and of the closed loop (``sim_multiparty``: participants who speak)."""
