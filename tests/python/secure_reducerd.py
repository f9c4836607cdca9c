"""Test support: a reducerd secured as deploy/k8s/overlays/mtls runs it (TLS,
mutual TLS with a client CA, per-job tokens), with certificates made now by
tests/make_test_certs.sh (the openssl command).

    certs = make_certs(tmp_dir)
    tokens = write_tokens(tmp_dir / "tokens", {"train": TOKEN})
    with ReducerdProcess(secure_flags(certs, tokens)) as server:
        reducer.Client(server.target, "train/0", token=TOKEN, **client_tls(certs))
"""

import hashlib
import os
import pathlib
import subprocess


def runfile(path):
    """`path` (relative to the workspace root) in the test's runfiles, or in
    the current directory outside `bazel test`."""
    srcdir, workspace = os.environ.get("TEST_SRCDIR"), os.environ.get("TEST_WORKSPACE")
    if srcdir and workspace:
        return pathlib.Path(srcdir, workspace, path)
    return pathlib.Path(path)


def make_certs(directory):
    """Makes tests/make_test_certs.sh's certificates in `directory`; returns it
    (a pathlib.Path): ca.pem, server.pem/.key, client.pem/.key, ..."""
    directory = pathlib.Path(directory)
    subprocess.run(["bash", str(runfile("tests/make_test_certs.sh")), str(directory)],
                   check=True, timeout=60)
    return directory


def sha256_hex(token):
    """What `printf %s "$TOKEN" | sha256sum` prints: a tokens-file line's hash."""
    return hashlib.sha256(token.encode()).hexdigest()


def write_tokens(path, tokens_by_job):
    """Writes a --job_tokens_file: one `JOB SHA256_HEX` line per job."""
    path = pathlib.Path(path)
    path.write_text("# test tokens\n" + "".join(
        f"{job} {sha256_hex(token)}\n" for job, token in tokens_by_job.items()))
    return path


def secure_flags(certs, tokens):
    """reducerd's flags of the tls overlay: TLS, client CA, tokens file."""
    return [f"--tls_cert_file={certs / 'server.pem'}",
            f"--tls_key_file={certs / 'server.key'}",
            f"--tls_client_ca_file={certs / 'ca.pem'}",
            f"--job_tokens_file={tokens}"]


def client_tls(certs):
    """reducer.Client's TLS arguments for mutual TLS with `certs`."""
    return {"tls_ca_file": str(certs / "ca.pem"),
            "tls_cert_file": str(certs / "client.pem"),
            "tls_key_file": str(certs / "client.key")}
