"""The test user the grader runs a suite as (grading.verdict.Channel's prologue and epilogue), in a real
container: what it may write, what it may not, and that everything the prologue changed is put back,
while a directory anyone may already write is left as it is (changing it would copy it up from the
image's layer for nothing)."""

from __future__ import annotations

import shlex
import subprocess

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)

from sandbatch.grading import verdict

WORKDIR = "/srv/closed/testbed"  # under a directory only root may enter, as an image may keep it
LISTED = ["/srv/closed", WORKDIR, f"{WORKDIR}/tests", f"{WORKDIR}/pkg", f"{WORKDIR}/built"]
# what the test user tries, one line printed for each thing it managed
ATTEMPTS = """
touch pkg/new && echo WROTE-777-DIR
touch built/new && echo WROTE-OWN-DIR
touch tests/added && echo ADDED-BESIDE-THE-TESTS
echo x >> tests/test_a.py && echo REWROTE-TEST
rm -f tests/test_a.py && echo REMOVED-TEST
mv tests/test_a.py pkg/ && echo MOVED-TEST
true
"""


def test_the_test_user_writes_where_it_must_and_everything_changed_is_put_back(docker_engine,  # noqa: F811
                                                                             docker_base_image):  # noqa: F811
    channel = verdict.Channel.new("/tmp/sandbatch", ["tests/test_a.py"])
    stat = "stat -c '%a %u:%g %n' " + " ".join(LISTED)
    script = "\n".join([
        "set -uo pipefail",
        # SWE-bench's layout: the repository 777, the image's build output (`built`) not
        f"mkdir -p {WORKDIR}/tests {WORKDIR}/pkg {WORKDIR}/built {channel.dir} && cd {WORKDIR}",
        "echo 'def test_a(): pass' > tests/test_a.py && chmod -R 777 . && chmod 755 built && chmod 700 /srv/closed",
        f"{stat} > /tmp/before",
        channel.prologue(WORKDIR, None, True),
        f"echo owners: $(stat -c %u:%a {WORKDIR}/pkg {WORKDIR}/built | tr '\\n' ' ')",
        f"sbv_as_tests bash -c {shlex.quote(ATTEMPTS)}",
        channel.epilogue(WORKDIR),
        f"{stat} > /tmp/after",
        "diff /tmp/before /tmp/after && echo PUT-BACK",
        "echo given back: $(stat -c %u pkg/new built/new tests/added | tr '\\n' ' ')",
    ])
    res = subprocess.run([docker_engine, "run", "--rm", docker_base_image, "bash", "-c", script],
                         capture_output=True, text=True, timeout=120)
    out = res.stdout
    # the 777 directory stays root's (anyone may write it already); the image's own 755 one becomes the user's
    assert f"owners: 0:777 {channel.uid}:755" in out, (out, res.stderr)
    done = set(out.splitlines())
    assert {"WROTE-777-DIR", "WROTE-OWN-DIR", "ADDED-BESIDE-THE-TESTS"} <= done, (out, res.stderr)
    assert not {"REWROTE-TEST", "REMOVED-TEST", "MOVED-TEST"} & done, (out, res.stderr)
    assert "PUT-BACK" in out, (out, res.stderr)  # modes and owners as before, /srv/closed 700 again
    assert "given back: 0 0 0" in out, (out, res.stderr)
