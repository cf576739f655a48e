"""A small scenario on the shipped catalogues, shared by the scenario, network and error tests:
two US metros (and Washington, which the Ashburn site belongs to), two sites, two
accelerators, one workload. Tests build variants with ``{**SMALL, …}``, never in place."""

SMALL = {
    "name": "small",
    "accelerators": ["h100-sxm", "h200-sxm"],
    "metros": ["chicago", "new-york", "washington"],
    "sites": ["chicago", "ashburn"],
    "workloads": ["chat"],
}
