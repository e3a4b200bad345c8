"""TEST DOUBLE of the verl package (tests/doubles/sim_verl): only what the simulated GKE's jobs import. NOT verl."""
