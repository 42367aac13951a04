"""Many arms over many dates: a manifest of robots and their recordings, each robot identified per
date on a Dask cluster, the fleet's table and report, and the joints whose friction rises."""
