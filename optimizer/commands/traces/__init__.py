"""Demand from request logs: read a log (`read`), derive rates, lengths and burstiness per
(metro, workload) (`derive`), turn them into a scenario's demand table and workload rows
(`table`), write them with a short report (`write`, `report`), and replay the log in
`fleetplan verify --trace` (`replay`)."""
