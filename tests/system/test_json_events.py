"""The typed --json events (docs/json-events.md): what a consumer acts on comes
as fields, not English.

A stack of NVIDIA-layout archives holding STAND-IN libraries (make_stack.py,
as test_doctor.py and test_user_surface.py use) is served by a real loopback
HTTP server; the real binary applies it into a --root sandbox with --json. The
machine is the real no-GPU one (--no-gpu). Each test checks the fields against
facts it computes itself: the sha256 and size of the files the server serves,
the paths it changes under the root, the bytes the server's "wrong" fault
sends. test_docs_name_every_event_type_and_field checks that the
documentation names every event type the code can emit (read from event.h's
EV_KINDS table and the ev_data calls) and every field the binary writes, so a
new event or field without docs fails here.
"""
import hashlib
import json
import os
import re
import shutil


from lib_gpu import has_nvidia_gpu
from lib_stack import make_stack, real_no_gpu_env

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DOCS = os.path.join(REPO, "docs", "json-events.md")
CUDA = "/opt/tfprov/cuda/12.3.2"
HEX64 = re.compile(r"[0-9a-f]{64}")


def events(p):
    """Every stdout line is one JSON object (and nothing else is on stdout)."""
    return [json.loads(ln) for ln in p.stdout.splitlines()]


def of(evs, type_, **match):
    return [e for e in evs if e["type"] == type_ and all(e.get(k) == v for k, v in match.items())]


def served(mirror):
    """{basename: (sha256, size)} of the archives the loopback server serves."""
    out = {}
    for d, _, files in os.walk(mirror.root):
        for f in files:
            if f.endswith((".tar.xz", ".tar.gz", ".whl", ".tar.bz2", ".conda")):
                data = open(os.path.join(d, f), "rb").read()
                out[f] = (hashlib.sha256(data).hexdigest(), len(data))
    return out


def relpath(mirror, name):
    """Where the server serves file `name` (relative to its root)."""
    return [os.path.relpath(os.path.join(d, f), mirror.root)
            for d, _, fs in os.walk(mirror.root) for f in fs if f == name][0]


def apply_json(tfprov, m, check=0):
    return tfprov.run("--json", "--no-gpu", "apply", "-y", m, env=real_no_gpu_env(),
                      check=check, timeout=300)


def test_apply_downloads_verifies_and_places(tfprov, tmp_path, mirror):
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    files = served(mirror)
    evs = events(apply_json(tfprov, m))
    assert evs[0]["type"] == "version" and evs[0]["data"]["ui"] == "1.6"

    # An artifact's event names it as the manifest does; its source is the URL of
    # the file the server serves, whose sha256 and size the fields must have.
    done = [e for e in of(evs, "download_done") if not e["from_cache"]]
    by_file = {os.path.basename(e["source"]): e for e in done}
    assert set(by_file) == set(files), [(e["item"], e["source"]) for e in done]
    # The steps take them later from the cache (re-hashed): said as such, never downloaded.
    again = of(evs, "download_done", from_cache=True)
    assert all(e["source"] == "cache" and e["sha256"] in {x["sha256"] for x in done}
               for e in again), again
    for fname, e in by_file.items():
        sha, size = files[fname]
        assert (e["sha256"], e["size"], e["from_cache"]) == (sha, size, False), e
        assert e["source"] == mirror.url("/" + relpath(mirror, fname)), e
        # The file in the cache is the verified one.
        assert hashlib.sha256(open(e["path"], "rb").read()).hexdigest() == sha
        name = e["item"]
        start = of(evs, "download_start", item=name)
        assert start and start[0]["sha256"] == sha and start[0]["size"] == size, start
        assert start[0]["offset"] == 0 and start[0]["mirror"] is None, start
        assert start[0]["source"] == e["source"], start
        ver = of(evs, "artifact_verified", item=name)
        assert [(v["sha256"], v["size"], v["source"]) for v in ver][0] == \
            (sha, size, e["source"]), ver
        # started, then verified, then done
        order = [x["type"] for x in evs if x.get("item") == name and x["type"] in
                 ("download_start", "artifact_verified", "download_done")]
        assert order[:3] == ["download_start", "artifact_verified", "download_done"], order
    assert not of(evs, "artifact_mismatch") and not of(evs, "download_failed")

    placed = of(evs, "placed", step="cuda")
    assert [(e["path"], e["what"], e["replaced"]) for e in placed] == [(CUDA, "tree", False)]
    on_disk = sum(len(ds) + len(fs) for _, ds, fs in os.walk(tfprov.path(CUDA)))
    # The tree's entries: what the step placed, cudnn's merge included later.
    assert placed[0]["count"] > 0 and placed[0]["count"] <= on_disk, (placed, on_disk)
    merged = of(evs, "placed", step="cudnn")
    assert merged and merged[0]["what"] == "share" and merged[0]["path"] == CUDA, merged
    for e in placed + merged:
        assert e["@level"] == "debug" and e["@message"].startswith(e["step"] + ": placed ")
    # Each placement is reported after its step committed, before its apply_complete.
    idx = {id(e): i for i, e in enumerate(evs)}
    cuda_done = of(evs, "apply_complete", step="cuda")[0]
    assert idx[id(placed[0])] < idx[id(cuda_done)]

    # The same run again from the cache (the stack destroyed first): no network.
    tfprov.run("--json", "destroy", "-y", "demo", check=0)
    n_get = len(mirror.requests)
    evs = events(apply_json(tfprov, m))
    assert len(mirror.requests) == n_get and not of(evs, "download_start")
    done = of(evs, "download_done")
    assert {e["sha256"] for e in done} == {sha for sha, _ in files.values()}, done
    assert all(e["from_cache"] is True and e["source"] == "cache" for e in done), done


def test_destroy_reports_removed_and_kept(tfprov, tmp_path, mirror):
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    mine = tfprov.path(CUDA + "/lib/my-notes.txt")
    # A person reads the sentence the 1.0 log said, on stderr as a warning.
    apply_json(tfprov, m)
    open(mine, "w").write("mine\n")
    p = tfprov.run("destroy", "-y", "demo", check=0)
    assert f"tfprov: warning: kept {CUDA}/lib/my-notes.txt: not placed by tfprov" in p.stderr
    shutil.rmtree(tfprov.path(CUDA))  # what destroy kept: mine, and the directories above it
    apply_json(tfprov, m)
    open(mine, "w").write("mine\n")
    p = tfprov.run("--json", "destroy", "-y", "demo", check=0)
    evs = events(p)
    removed = of(evs, "removed", step="cuda")
    assert removed and removed[0]["count"] > 0 and removed[0]["path"].startswith(CUDA), removed
    kept = of(evs, "kept")
    assert [(e["path"], e["why"], e["@level"]) for e in kept if "my-notes" in e["path"]] == \
        [(CUDA + "/lib/my-notes.txt", "not placed by tfprov", "warn")], kept
    assert os.path.exists(mine)


def test_sha256_mismatch_names_expected_actual_and_quarantine(tfprov, tmp_path, mirror):
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    files = served(mirror)
    name = [f for f in files if f.startswith("cudnn")][0]
    rel = relpath(mirror, name)
    mirror.fault("/" + rel, "wrong")  # same length, the middle byte flipped
    p = apply_json(tfprov, m, check=5)
    evs = events(p)
    bad = of(evs, "artifact_mismatch", source=mirror.url("/" + rel))
    assert bad, p.stdout
    data = bytearray(open(os.path.join(mirror.root, rel), "rb").read())
    data[len(data) // 2] ^= 0xFF
    want, size = files[name]
    e = bad[0]
    assert (e["check"], e["expected"], e["actual"]) == \
        ("sha256", want, hashlib.sha256(bytes(data)).hexdigest()), e
    assert (e["sha256"], e["size"], e["bytes"], e["@level"]) == (want, size, size, "error"), e
    assert e["source"] == mirror.url("/" + rel) and e["mirror"] is None, e
    # The quarantined file holds exactly the bytes that were refused.
    assert hashlib.sha256(open(e["quarantined"], "rb").read()).hexdigest() == e["actual"]
    assert "sha256 mismatch" in e["@message"] and want in e["@message"]
    assert not of(evs, "download_done", item=e["item"]) and not of(evs, "placed")
    assert evs[-1]["type"] == "result" and evs[-1]["exit_code"] == 5


def test_retry_then_failure_are_typed(tfprov, tmp_path, mirror):
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    name = [f for f in served(mirror) if f.startswith("cudnn")][0]
    rel = relpath(mirror, name)
    mirror.fault("/" + rel, "404")
    evs = events(apply_json(tfprov, m, check=1))
    retry = of(evs, "download_retry", source=mirror.url("/" + rel))
    assert retry and "HTTP 404" in retry[0]["error"] and retry[0]["@level"] == "warn", retry
    failed = of(evs, "download_failed", item=retry[0]["item"])
    assert failed and failed[0]["@level"] == "error" and rel in failed[0]["error"], failed


def test_verify_status_doctor_findings(tfprov, tmp_path, mirror):
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    apply_json(tfprov, m)
    lib = CUDA + "/lib/libcudart.so.12.3.101"
    gone = [os.path.join(CUDA, "include", f) for f in os.listdir(tfprov.path(CUDA + "/include"))][0]
    mode = "mode %04o" % (os.stat(tfprov.path(lib)).st_mode & 0o7777)
    os.chmod(tfprov.path(lib), 0o600)
    os.unlink(tfprov.path(gone))
    open(tfprov.path(CUDA + "/lib/stray.so"), "w").write("x")

    p = tfprov.run("--json", "--no-gpu", "verify", "--deep", env=real_no_gpu_env(),
                   check=None, timeout=300)
    assert p.returncode == 2, p.stdout
    f = {(e["kind"], e["path"]): e for e in of(events(p), "finding", origin="verify")}
    assert ("mode", lib) in f, f.keys()
    e = f[("mode", lib)]
    assert (e["expected"], e["actual"], e["code"], e["severity"], e["stack"]) == \
        (mode, "mode 0600", "M", "warning", "demo"), e
    assert (f[("deleted", gone)]["expected"], f[("deleted", gone)]["actual"]) == \
        ("present", "absent")
    stray = CUDA + "/lib/stray.so"
    added = f[("added", stray)]
    assert (added["code"], added["expected"], added["actual"]) == ("A", "absent", "present")
    # audit_finding (1.0) still says the same
    audit = {(a["data"]["code"], a["data"]["path"]) for a in of(events(p), "audit_finding")}
    assert {(e["code"], e["path"]) for e in f.values() if e.get("code")} == audit

    st = events(tfprov.run("--json", "status", check=2))
    drift = of(st, "finding", origin="status", kind="drift")
    assert drift, st
    cuda = [e for e in drift if e["path"] == "cuda"]
    assert cuda and cuda[0]["actual"] == "1 missing, 1 changed", drift
    status = of(st, "stack_status")[0]["data"]["resources"]
    n = [r["paths"] for r in status if r["step"] == "cuda"][0]
    assert cuda[0]["expected"] == f"{n} paths as placed" and cuda[0]["stack"] == "demo"

    dr = events(tfprov.run("--json", "--no-gpu", "doctor", env=real_no_gpu_env(), check=None,
                           timeout=300))
    found = of(dr, "finding", origin="doctor")
    assert found
    assert {e["kind"] for e in found} >= {"driver", "libraries", "shadowing"}, found
    assert all(e["severity"] in ("ok", "note", "warning", "error", "reboot") for e in found)
    drv = [e for e in found if e["kind"] == "driver"][0]
    assert drv["stack"] is None
    if not has_nvidia_gpu():  # the machines of this suite: no driver, --no-gpu allows it
        assert drv["severity"] == "note" and "no NVIDIA driver" in drv["actual"], drv
    assert all(e["stack"] == "demo" for e in found if e["kind"] == "libraries")
    # The sentence a person reads is the @message; no doctor line is left as a bare log.
    assert not [e for e in dr if e["type"] == "log" and "[" in e.get("@message", "")[:6]]


def emitted_types():
    """Every event type the code can emit: the EV_KINDS table of event.h and the
    types that ev_data, ev_version and the diagnostic and diff events name."""
    src = open(os.path.join(REPO, "engine", "base", "event.h")).read()
    table = src[src.index("#define EV_KINDS(X)"):src.index("#define EV_KIND_ENUM")]
    types = set(re.findall(r'X\(EV_\w+,\s*"(\w+)"\)', table)) - {"data"}
    assert len(types) >= 17, types  # the table parsed
    for d in ("cli", "engine", "modules"):
        for dirpath, _, names in os.walk(os.path.join(REPO, d)):
            for f in (n for n in names if n.endswith(".c")):
                c = open(os.path.join(dirpath, f)).read()
                types |= set(re.findall(r'ev_data\([^,]+,\s*"(\w+)"', c))
                types |= set(re.findall(r'\.type\s*=\s*"(\w+)"', c))
                types |= set(re.findall(r'"type",\s*"(\w+)"', c))
    return types


def documented_rows():
    rows = {}
    for ln in open(DOCS).read().splitlines():
        mt = re.match(r"\| `(\w+)` \|([^|]*)\|", ln)
        if mt:
            rows.setdefault(mt.group(1), mt.group(2))  # the type's fields column
    return rows


def test_docs_name_every_event_type_and_field(tfprov, tmp_path, mirror):
    """docs/json-events.md has a row for every type the code defines, and each typed
    event's row names every field the binary wrote in the runs of this file's kind."""
    rows = documented_rows()
    missing = emitted_types() - set(rows)
    assert not missing, f"event types without a row in docs/json-events.md: {missing}"
    ver = re.search(r'TFPROV_JSON_UI_VERSION "([\d.]+)"',
                    open(os.path.join(REPO, "engine", "base", "event.h")).read()).group(1)
    assert re.search(rf"UI schema {re.escape(ver)}\b", open(DOCS).read()), "title names " + ver
    assert f"**{ver}**" in open(DOCS).read(), "no changelog line for " + ver
    # Fields: every key of every typed event a run writes is named in its row.
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    evs = events(apply_json(tfprov, m))
    evs += events(tfprov.run("--json", "destroy", "-y", "demo", check=0))
    seen = set()
    for e in evs:
        if e["type"] in ("version", "stack_status", "stack_show", "diff", "diagnostic"):
            continue
        seen.add(e["type"])
        for k in e:
            if k.startswith("@") or k in ("type", "data"):
                continue
            assert re.search(r"\b%s\b" % k, rows[e["type"]]), \
                f"field {k} of {e['type']} is not in its fields column in docs/json-events.md"
    assert {"download_start", "download_done", "artifact_verified", "placed",
            "removed"} <= seen, seen


def test_cached_copy_that_no_longer_matches_is_quarantined_and_fetched(tfprov, tmp_path, mirror):
    """A cache entry whose bytes changed (a power cut, tampering): a warn-level
    artifact_mismatch from "cache" with both digests, then a new download."""
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    evs = events(apply_json(tfprov, m))
    tfprov.run("destroy", "-y", "demo", check=0)
    first = [e for e in of(evs, "download_done", from_cache=False)
             if os.path.basename(e["source"]).startswith("cudnn")][0]
    with open(first["path"], "r+b") as f:
        f.seek(10)
        f.write(b"tampered")
    actual = hashlib.sha256(open(first["path"], "rb").read()).hexdigest()
    evs = events(apply_json(tfprov, m))
    bad = of(evs, "artifact_mismatch", item=first["item"])
    assert len(bad) == 1, bad
    e = bad[0]
    assert (e["source"], e["check"], e["expected"], e["actual"], e["@level"]) == \
        ("cache", "sha256", first["sha256"], actual, "warn"), e
    assert hashlib.sha256(open(e["quarantined"], "rb").read()).hexdigest() == actual
    again = of(evs, "download_done", item=first["item"], from_cache=False)
    assert again and again[0]["sha256"] == first["sha256"], again
    assert evs.index(e) < evs.index(again[0])
    assert evs[-1]["exit_code"] == 0


def test_status_names_an_unfinished_apply(tfprov, tmp_path, mirror):
    """The last apply did not finish (its row says so, as after a kill): status's
    finding names the manifest that finishes it and the result it had."""
    import sqlite3
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    apply_json(tfprov, m)
    db = sqlite3.connect(tfprov.state_db)
    with db:
        db.execute("UPDATE generations SET result = 'interrupted' "
                   "WHERE id = (SELECT max(id) FROM generations)")
    db.close()
    st = events(tfprov.run("--json", "status", check=2))
    f = of(st, "finding", origin="status", kind="unfinished_apply")
    assert [(e["stack"], e["path"], e["expected"], e["actual"], e["fix"]) for e in f] == \
        [("demo", m, "ok", "interrupted", "tfprov apply " + m)], f
    assert "was interrupted" in f[0]["@message"]


def test_offline_missing_names_every_artifact_as_fields(tfprov, tmp_path, mirror):
    """--offline with an empty cache and an empty --mirror DIR: one offline_missing
    event, whose missing[] are the served archives (sha256 and size as the server
    has them, each URL on the server), and nothing downloaded."""
    m = make_stack(mirror.root, mirror, tmp_path / "stack.yaml")
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    p = tfprov.run("--json", "--offline", "--mirror", empty, "--no-gpu", "apply", "-y", m,
                   env=real_no_gpu_env(), check=1)
    evs = events(p)
    off = of(evs, "offline_missing")
    assert len(off) == 1 and off[0]["@level"] == "error", off
    miss = off[0]["missing"]
    assert sorted((a["sha256"], a["size"]) for a in miss) == sorted(served(mirror).values())
    for a in miss:
        assert a["url"] == mirror.url("/" + relpath(mirror, os.path.basename(a["url"]))), a
        assert a["name"] in off[0]["@message"], a
    assert off[0]["cache"].startswith(tfprov.root + "/") and off[0]["mirrors"] == [str(empty)]
    assert f"{len(miss)} artifacts are not in the cache {off[0]['cache']} nor in a mirror" \
        in off[0]["@message"], off[0]
    for k in off[0]:
        assert k.startswith("@") or k == "type" or re.search(
            r"\b%s\b" % k, documented_rows()["offline_missing"]), k
    # The one error a consumer reads is the typed one; the run ends with exit 1.
    assert [e["type"] for e in evs if e.get("@level") == "error"] == ["offline_missing",
                                                                      "result"], evs
    assert evs[-1]["exit_code"] == 1 and mirror.requests == []
