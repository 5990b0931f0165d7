from tests.support.pve_lab import lab, make_lab  # noqa: F401  (fixtures: the lab's PVE API in-process)
from tests.support.sshd import sshd  # noqa: F401  (fixture)
