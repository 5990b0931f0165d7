"""Redaction with canaries: every secret form we know must disappear, the rest must stay."""

from __future__ import annotations

import pytest

from provisioner.diagnose import diagnose, redact

CANARY = "Zq7-canary-4f1e9b2c8d"
UUID = "5d1f3a7e-2b4c-4e8f-9a1b-3c5d7e9f1a2b"
TICKET = "PVE:root@pam:6745A1B2::dGhpcyBpcyBub3QgYSByZWFsIHNpZ25hdHVyZSBidXQgbG9va3MgbGlrZSBvbmU="


@pytest.mark.parametrize(
    "text",
    [
        f"Authorization: PVEAPIToken=root@pam!provisioner={UUID}",
        f"curl -H 'Authorization: PVEAPIToken=automation@pve!ci={UUID}' https://pve:8006/api2/json/nodes",
        f"PVEAPIToken=root@pam!provisioner={UUID}",
        f"{{'Authorization': 'PVEAPIToken=root@pam!tok={UUID}', 'Accept': 'application/json'}}",
        f"Cookie: PVEAuthCookie={TICKET}",
        f"PVEAuthCookie={TICKET}; path=/",
        f'{{"data":{{"ticket":"{TICKET}","CSRFPreventionToken":"6745A1B2:{CANARY}","username":"root@pam"}}}}',
        f"CSRFPreventionToken: 6745A1B2:{CANARY}",
        f"https://root:{CANARY}@pve.example.org:8006/",
        f"https://pve:8006/api2/json/access/ticket?username=root@pam&password={CANARY}&otp=",
        f"provisioner replay pb.yaml --password {CANARY} --json",
        f"provisioner replay pb.yaml --password='{CANARY}' --json",
        f"--api-token={CANARY}",
        f"PVE_PASSWORD={CANARY} provisioner plan pb.yaml",
        f"export HF_TOKEN={CANARY}",
        f"  password: {CANARY}",
        f'  token_value: "{CANARY}"',
        f"secret={CANARY}",
        f'{{"password": "{CANARY}", "user": "root@pam"}}',
        f"sshpass -p '{CANARY}' ssh root@pve",
        f"Authorization: Bearer {CANARY}",
        "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    ],
)
def test_secret_forms_are_removed(text: str) -> None:
    out = redact(text)
    for secret in (CANARY, UUID, TICKET, TICKET.split("::")[1], "A1b2C3d4E5f6G7h8I9j0", "AbCdEfGhIjKlMnOpQrSt"):
        assert secret not in out, out
    assert "<redacted>" in out


def test_private_key_blocks() -> None:
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n" + CANARY + "\n"
    for kind in ("OPENSSH PRIVATE KEY", "RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY"):
        text = f"before\n-----BEGIN {kind}-----\n{body}-----END {kind}-----\nafter"
        out = redact(text)
        assert CANARY not in out and "b3BlbnNzaC1rZXkt" not in out
        assert out.startswith("before\n") and out.endswith("\nafter")
        assert f"-----BEGIN {kind}-----" in out
    truncated = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}"  # pasted without its end line
    assert CANARY not in redact(truncated)


def test_known_secrets_also_url_encoded() -> None:
    secret = "p@ss w/rd&1"
    text = f"login with {secret} failed; url was ?x=p%40ss%20w%2Frd%261 and form p%40ss+w%2Frd%261"
    out = redact(text, known_secrets=[secret])
    assert "p@ss" not in out and "p%40ss" not in out
    assert out.count("<redacted>") == 3


def test_short_known_secrets_are_masked_as_whole_tokens_only() -> None:
    # issue #19: a 2-character password used to pass through untouched.
    assert redact("login as root with x9 failed", known_secrets=["x9", ""]) == \
        "login as root with <redacted> failed"
    assert redact("x9y and ax9 are other words", known_secrets=["x9"]) == "x9y and ax9 are other words"


def test_python_dict_repr_password_is_masked() -> None:
    # issue #19: {'password': 'x'} (a Python repr in an exception or a log line)
    out = redact("api settings: {'user': 'root@pam', 'password': 'x', 'port': 8006}")
    assert out == "api settings: {'user': 'root@pam', 'password': '<redacted>', 'port': 8006}"


def test_curl_user_password_is_masked() -> None:
    # issue #19: curl -u user:x  (https://curl.se/docs/manpage.html#-u)
    assert redact("curl -fsS -u admin:hunter2 https://mirror/x") == "curl -fsS -u admin:<redacted> https://mirror/x"
    assert redact("curl --user=admin:hunter2 https://mirror/x") == "curl --user=admin:<redacted> https://mirror/x"


def test_yaml_block_scalar_value_is_masked() -> None:
    # issue #19: a YAML block value (`password: |` then the value on indented lines)
    text = "api:\n  user: root@pam\n  password: |\n    s3cr3t-value\n    second-line\n  port: 8006\n"
    out = redact(text)
    assert "s3cr3t" not in out and "second-line" not in out
    assert "  port: 8006" in out and "  user: root@pam" in out and "<redacted>" in out


def test_secret_named_environment_values_are_masked_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue #19: diagnose --log ignored the secrets of the environment (the one redactor reads them).
    monkeypatch.setenv("PVE_PASSWORD", "env-pw-Zq81")
    assert redact("sshpass failed for env-pw-Zq81") == "sshpass failed for <redacted>"


def test_references_and_ordinary_text_are_kept() -> None:
    kept = [
        "password: env:PVE_PASSWORD",
        "token_value: file:~/.config/gpu-provisioner/token",
        "tokenizer: meta-llama/Llama-3.1-8B",
        "max_tokens=512",
        "NCCL INFO Ring 00 : 1[1b000] -> 2[3d000] via direct shared memory",
        "Failed to initialize NVML: Driver/library version mismatch",
        "https://download.pytorch.org/whl/cu128",
        "lxc.cgroup2.devices.allow: c 195:* rwm",
    ]
    for line in kept:
        assert redact(line) == line


def test_findings_evidence_is_redacted() -> None:
    log = (
        f"PUT https://pve:8006/api2/json/nodes/pve/lxc/101/config?password={CANARY} -> 403 Forbidden: "
        "Permission check failed (configuring device passthrough is only allowed for root@pam) "
        f"[token {UUID}]"
    )
    findings = diagnose(log, known_secrets=[UUID])
    assert findings[0].category == "proxmox_lxc"
    evidence = "\n".join(e for f in findings for e in f.evidence)
    assert "Permission check failed" in evidence
    assert CANARY not in evidence and UUID not in evidence


def test_idempotent() -> None:
    text = f"password={CANARY} Authorization: Bearer {CANARY}"
    once = redact(text)
    assert redact(once) == once


def test_a_rule_skipped_for_want_of_its_trigger_never_lets_a_case_folded_secret_through() -> None:
    """The rules run only on text holding their trigger (a lower-case literal): the check folds case as the
    rules' IGNORECASE matching does, so a key spelt with the long s (U+017F) or the Kelvin sign is still masked;
    a text without any trigger is returned unchanged."""
    from provisioner.redaction import redact

    for key in ("pa\u017fsword", "api_\u212aey", "TOKEN"):
        out = redact(f"{key}=hunter2hunter2\n")
        assert "hunter2hunter2" not in out, out
    plain = "NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x38:852)\n" * 1000
    assert redact(plain) == plain
