"""reducer.Client against a reducerd secured as deploy/k8s/overlays/mtls runs
it: TLS, mutual TLS (a client CA) and per-job tokens, with certificates made
at test time by tests/make_test_certs.sh.

The tokens file has a line for JOB_A, which (the prefix rule) also covers
every job named JOB_A/...; each test runs a job of that form of its own.
No exception text may ever hold a token: every error raised here is checked.
"""

import uuid

import numpy as np
import pytest

import reducer
from module_testing import time_limit  # noqa: F401  (a fixture)
from reducerd_process import ReducerdProcess, run_ranks
from secure_reducerd import client_tls, make_certs, secure_flags, write_tokens


JOB_A = "pysec-a"
JOB_B = "pysec-b"
TOKEN_A = "py-token-of-job-a-5e0c1d"
TOKEN_B = "py-token-of-job-b-9a4f27"
ALL_TOKENS = (TOKEN_A, TOKEN_B, "not-a-token-3b8e")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def server(certs, tmp_path_factory):
    tokens = write_tokens(tmp_path_factory.mktemp("tokens") / "tokens",
                          {JOB_A: TOKEN_A, JOB_B: TOKEN_B})
    with ReducerdProcess(secure_flags(certs, tokens)) as s:
        yield s


def job_a():
    return f"{JOB_A}/{uuid.uuid4().hex}"


def assert_no_token(error):
    for text in (str(error), repr(error), *map(str, error.args)):
        for token in ALL_TOKENS:
            assert token not in text, f"a token leaked into {type(error).__name__}"


def connect_error(expected, target, job, **options):
    """The exception (of class `expected`) a one-rank Client(...) raises."""
    with pytest.raises(expected) as info:
        reducer.Client(target, job, 0, 1, 10.0, **options)
    assert_no_token(info.value)
    return info.value


def rank_input(rank):
    return (np.arange(6, dtype=np.float64) % 4 + rank + 1).reshape(2, 3)


def test_two_ranks_with_token_and_mutual_tls_all_reduce(server, certs):
    world = 2
    # Expected: the sum of both ranks' inputs, computed here.
    want = sum(rank_input(r) for r in range(world))
    options = dict(token=TOKEN_A, **client_tls(certs))
    results = run_ranks(world, server.target, job_a(),
                        lambda c: c.all_reduce(rank_input(c.rank)),
                        client_options=options)
    for got in results:
        np.testing.assert_array_equal(got, want)
    # A pathlib.Path works as a file, and server_name names the certificate's
    # DNS name rather than the target's IP address.
    tls = client_tls(certs)
    tls["tls_ca_file"] = certs / "ca.pem"
    with reducer.Client(server.target, job_a(), 0, 1, 10.0, token=TOKEN_A,
                        server_name="localhost", shared_memory="off", **tls) as c:
        assert c.all_reduce(3) == 3


def test_no_token_is_unauthenticated_saying_token_kwarg(server, certs):
    job = job_a()
    error = connect_error(reducer.Unauthenticated, server.target, job, **client_tls(certs))
    assert job in str(error)
    assert "token=" in str(error)


def test_another_jobs_token_is_permission_denied(server, certs):
    job = job_a()
    error = connect_error(reducer.PermissionDenied, server.target, job, token=TOKEN_B,
                          **client_tls(certs))
    assert job in str(error) and "another job" in str(error)
    # An unknown token: not this job's, not any job's.
    error = connect_error(reducer.Unauthenticated, server.target, job,
                          token="not-a-token-3b8e", **client_tls(certs))
    assert "not one reducerd knows" in str(error)


def test_plaintext_client_is_told_the_port_serves_tls(server):
    error = connect_error(reducer.FailedPrecondition, server.target, job_a(),
                          token=TOKEN_A)
    assert "TLS" in str(error)
    assert server.target in str(error)


def test_cert_and_key_go_together(server, certs):
    ca = str(certs / "ca.pem")
    error = connect_error(ValueError, server.target, job_a(), token=TOKEN_A,
                          tls_ca_file=ca, tls_cert_file=str(certs / "client.pem"))
    assert "tls_key_file" in str(error)
    error = connect_error(ValueError, server.target, job_a(), token=TOKEN_A,
                          tls_ca_file=ca, tls_key_file=str(certs / "client.key"))
    assert "tls_cert_file" in str(error)
    # TLS without its CA.
    error = connect_error(ValueError, server.target, job_a(), token=TOKEN_A,
                          server_name="localhost")
    assert "tls_ca_file" in str(error)


def test_missing_files_are_named_with_their_path(server, certs, tmp_path):
    absent = str(tmp_path / "absent-ca.pem")
    error = connect_error(ValueError, server.target, job_a(), token=TOKEN_A,
                          tls_ca_file=absent)
    assert "tls_ca_file" in str(error) and absent in str(error)
    absent_key = str(tmp_path / "absent.key")
    error = connect_error(ValueError, server.target, job_a(), token=TOKEN_A,
                          tls_ca_file=str(certs / "ca.pem"),
                          tls_cert_file=str(certs / "client.pem"), tls_key_file=absent_key)
    assert "tls_key_file" in str(error) and absent_key in str(error)


def test_bad_values_raise_value_error_without_the_token(server, certs):
    error = connect_error(ValueError, server.target, job_a(), token=TOKEN_A,
                          shared_memory="sometimes", **client_tls(certs))
    assert "shared_memory" in str(error) and "sometimes" in str(error)
    # A token read from a file with its newline, and an empty one.
    error = connect_error(ValueError, server.target, job_a(), token=TOKEN_A + "\n",
                          **client_tls(certs))
    assert "token" in str(error)
    error = connect_error(ValueError, server.target, job_a(), token="",
                          **client_tls(certs))
    assert "token is empty" in str(error)
