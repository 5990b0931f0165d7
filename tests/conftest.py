from tests.support.sshd import sshd  # noqa: F401  (fixture)
