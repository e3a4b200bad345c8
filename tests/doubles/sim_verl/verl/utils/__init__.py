"""TEST DOUBLE of ``verl.utils`` (tests/doubles/sim_verl): only the reward scoring the stand-in trainer uses. NOT verl."""
