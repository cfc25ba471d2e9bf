"""Object-storage repositories without a store: URL parsing, the content-addressed cache, and
RepositorySet over a fake store (listing, fetching, fingerprints, failures)."""

from __future__ import annotations

import builtins
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.repository import DuplicateModel, ModelDir
from inferd.repository.cache import CACHE_ENV, ModelCache, StoredObject, default_cache_dir
from inferd.repository.remote import (
    ObjectStore,
    RemoteRepository,
    RepositorySet,
    StoreURL,
    Unreadable,
    parse_store_url,
)

# -- URLs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s3://bucket", StoreURL("s3", "bucket")),
        ("s3://bucket/", StoreURL("s3", "bucket")),
        ("s3://bucket/a/b", StoreURL("s3", "bucket", "a/b")),
        ("s3://bucket//a//b/", StoreURL("s3", "bucket", "a/b")),
        ("s3://localhost:9000/bucket/models", StoreURL("s3", "bucket", "models", "http://localhost:9000")),
        ("s3://10.0.0.1:80/b", StoreURL("s3", "b", "", "http://10.0.0.1:80")),
        ("s3://https://minio.local:443/b/p", StoreURL("s3", "b", "p", "https://minio.local:443")),
        ("s3://http://h:1/b/p", StoreURL("s3", "b", "p", "http://h:1")),
        ("as://acct/container", StoreURL("as", "container", "", account="acct")),
        ("as://acct/container/path/to/repo", StoreURL("as", "container", "path/to/repo", account="acct")),
        ("gs://bucket", StoreURL("gs", "bucket")),
        ("gs://bucket//model_repository/", StoreURL("gs", "bucket", "model_repository")),
        ("gs://triton_sample_models/24.09", StoreURL("gs", "triton_sample_models", "24.09")),
    ],
)
def test_parse_store_url(text: str, expected: StoreURL) -> None:
    assert parse_store_url(text) == expected
    # argparse's type=Path folds "//" to "/": the URL survives it
    assert parse_store_url(Path(text)) == expected


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("s3://bucket/a/b", "s3://bucket/a/b"),
        ("s3://bucket", "s3://bucket"),
        ("s3://localhost:9000/bucket/models", "s3://localhost:9000/bucket/models"),
        ("s3://https://minio.local:443/b/p", "s3://https://minio.local:443/b/p"),
        ("as://acct/c/p", "as://acct/c/p"),
        ("gs://bucket/a/b", "gs://bucket/a/b"),
        ("gs://bucket", "gs://bucket"),
    ],
)
def test_store_url_prints_as_written(text: str, shown: str) -> None:
    url = parse_store_url(text)
    assert url is not None and str(url) == shown
    assert parse_store_url(str(url)) == url


@pytest.mark.parametrize("text", ["models", "/abs/models", "./s3/x", "gs3://x", "s3", "file:///x"])
def test_local_paths_are_not_urls(text: str) -> None:
    assert parse_store_url(text) is None


@pytest.mark.parametrize("text", ["s3://", "s3:///", "as://acct", "as://acct/", "as://", "gs://", "gs:///"])
def test_malformed_urls(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid"):
        parse_store_url(text)


def test_key_prefix() -> None:
    assert StoreURL("s3", "b").key_prefix == ""
    assert StoreURL("s3", "b", "a/b").key_prefix == "a/b/"


# -- the cache -------------------------------------------------------------------------------------

FILES = {"m/config.pbtxt": b'backend: "python"\n', "m/1/model.py": b"# model\n"}


def objects(files: dict[str, bytes], etag: str = "e1") -> list[StoredObject]:
    return [StoredObject(p, len(d), f"{etag}-{p}") for p, d in files.items()]


class Downloads:
    """A download function over ``files`` that counts its calls."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.calls: list[str] = []

    def __call__(self, obj: StoredObject, dest: Path) -> None:
        self.calls.append(obj.path)
        dest.write_bytes(self.files[obj.path])


def test_cache_fetches_once_and_shares(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path)
    dl = Downloads(FILES)
    folder = cache.fetch("s3://b/p", "m", objects(FILES), dl)
    assert folder.name == "m" and folder.parent.parent == tmp_path
    assert (folder / "1" / "model.py").read_bytes() == b"# model\n"
    assert sorted(dl.calls) == sorted(FILES)
    # another cache object on the same folder (another server): nothing fetched again
    dl2 = Downloads(FILES)
    assert ModelCache(tmp_path).fetch("s3://b/p", "m", objects(FILES), dl2) == folder
    assert dl2.calls == []
    # no temporary folder left behind
    assert [p.name for p in tmp_path.iterdir()] == [folder.parent.name]


def test_cache_key_follows_content_and_source(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path)
    base = cache.key("s3://b/p", "m", objects(FILES))
    assert cache.key("s3://b/p", "m", list(reversed(objects(FILES)))) == base  # order-free
    assert cache.key("s3://b/p", "m", objects(FILES, etag="e2")) != base  # a rewritten object
    assert cache.key("s3://b/q", "m", objects(FILES)) != base  # another store
    assert cache.key("s3://b/p", "m", objects(FILES)[:1]) != base  # an object removed
    changed = cache.fetch("s3://b/p", "m", objects(FILES, etag="e2"), Downloads(FILES))
    assert changed != cache.fetch("s3://b/p", "m", objects(FILES), Downloads(FILES))


def test_cache_folder_markers_and_unsafe_paths(tmp_path: Path) -> None:
    listed = [
        *objects(FILES),
        StoredObject("m/2/", 0, "d"),  # an empty version folder survives as a marker
        StoredObject("m/../escape.txt", 1, "x"),
        StoredObject("m/./x", 1, "x"),
    ]
    dl = Downloads(FILES)
    folder = ModelCache(tmp_path).fetch("s3://b", "m", listed, dl)
    assert (folder / "2").is_dir()
    assert not (tmp_path / "escape.txt").exists()
    assert sorted(dl.calls) == sorted(FILES)


def test_cache_failed_fetch_leaves_nothing(tmp_path: Path) -> None:
    def broken(obj: StoredObject, dest: Path) -> None:
        raise UnavailableError("connection reset")

    with pytest.raises(UnavailableError, match="connection reset"):
        ModelCache(tmp_path).fetch("s3://b", "m", objects(FILES), broken)
    assert list(tmp_path.iterdir()) == []


def test_cache_object_changed_while_fetched(tmp_path: Path) -> None:
    def short(obj: StoredObject, dest: Path) -> None:
        dest.write_bytes(b"x")

    with pytest.raises(UnavailableError, match="changed while it was fetched"):
        ModelCache(tmp_path).fetch("s3://b", "m", objects(FILES), short)
    assert list(tmp_path.iterdir()) == []


def test_cache_race_the_first_rename_wins(tmp_path: Path) -> None:
    """Another process publishes the same model while this one downloads: this one's copy is
    dropped and the winner's folder is used."""
    cache = ModelCache(tmp_path)
    winner: list[Path] = []

    def racing(obj: StoredObject, dest: Path) -> None:
        if not winner:
            winner.append(ModelCache(tmp_path).fetch("s3://b", "m", objects(FILES), Downloads(FILES)))
        dest.write_bytes(FILES[obj.path])

    folder = cache.fetch("s3://b", "m", objects(FILES), racing)
    assert folder == winner[0]
    assert [p.name for p in tmp_path.iterdir()] == [folder.parent.name]


def test_cache_threads_fetching_at_once(tmp_path: Path) -> None:
    barrier = threading.Barrier(4)
    results: list[Path] = []

    def fetch() -> None:
        def slow(obj: StoredObject, dest: Path) -> None:
            if obj.path == "m/config.pbtxt":
                barrier.wait(10)  # all four are downloading at once
            dest.write_bytes(FILES[obj.path])

        results.append(ModelCache(tmp_path).fetch("s3://b", "m", objects(FILES), slow))

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(set(results)) == 1 and len(results) == 4
    assert (results[0] / "config.pbtxt").read_bytes() == FILES["m/config.pbtxt"]
    assert [p.name for p in tmp_path.iterdir()] == [results[0].parent.name]


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "inferd" / "models"


# -- RepositorySet over a fake store ---------------------------------------------------------------


class FakeStore:
    """A store in memory: path -> (data, etag); ``down`` makes every call fail."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.down = False
        self.downloads = 0

    def put(self, path: str, data: bytes) -> None:
        n = int(self.objects.get(path, (b"", "0"))[1]) + 1
        self.objects[path] = (data, str(n))

    def list(self) -> list[StoredObject]:
        if self.down:
            raise UnavailableError("Could not connect to the endpoint URL (secret=hunter22)")
        return [StoredObject(p, len(d), e) for p, (d, e) in sorted(self.objects.items())]

    def download(self, obj: StoredObject, dest: Path) -> None:
        self.downloads += 1
        dest.write_bytes(self.objects[obj.path][0])


def model_files(store: FakeStore, name: str) -> None:
    store.put(f"{name}/config.pbtxt", f'name: "{name}"\nbackend: "python"\n'.encode())
    store.put(f"{name}/1/model.py", b"# model\n")


def repo_set(tmp_path: Path, store: FakeStore, *extra: str | Path) -> RepositorySet:
    rs = RepositorySet(["s3://bucket/models", *extra], ModelCache(tmp_path / "cache"))
    factory: Any = lambda url: store  # noqa: E731
    rs.remote[0] = RemoteRepository(rs.remote[0].url, ModelCache(tmp_path / "cache"), factory)
    return rs


def test_fake_store_is_an_object_store() -> None:
    store: ObjectStore = FakeStore()
    assert store.list() == []


def test_scan_fetches_remote_models_beside_local_ones(tmp_path: Path) -> None:
    local = tmp_path / "local"
    (local / "here" / "1").mkdir(parents=True)
    store = FakeStore()
    model_files(store, "a")
    model_files(store, "b")
    store.put("README.md", b"a file beside the models is no model")
    found = repo_set(tmp_path, store, local).scan()
    assert list(found) == ["a", "b", "here"]
    a = found["a"]
    assert isinstance(a, ModelDir) and a.name == "a" and list(a.versions) == [1]
    assert a.path.is_relative_to(tmp_path / "cache")
    assert (a.path / "config.pbtxt").read_text().startswith('name: "a"')
    assert isinstance(found["here"], ModelDir) and found["here"].repository == local


def test_duplicate_between_local_and_remote(tmp_path: Path) -> None:
    local = tmp_path / "local"
    (local / "a" / "1").mkdir(parents=True)
    store = FakeStore()
    model_files(store, "a")
    rs = repo_set(tmp_path, store, local)
    assert isinstance(rs.scan()["a"], DuplicateModel)
    assert isinstance(rs.find("a"), DuplicateModel)


def test_model_namespacing_keys_every_model_by_its_repository(tmp_path: Path) -> None:
    from inferd.repository.namespaced import NamespacedRepositories
    from inferd.repository.scan import DUPLICATE_REASON, key_name, key_namespace, model_key

    for repo in ("one", "two"):
        (tmp_path / repo / "same" / "1").mkdir(parents=True)
    (tmp_path / "one" / "only_here" / "1").mkdir(parents=True)
    repos = [tmp_path / "one", tmp_path / "two"]
    plain = RepositorySet(repos, ModelCache(tmp_path / "cache"))
    entry = plain.scan()["same"]
    assert isinstance(entry, DuplicateModel) and entry.reason == DUPLICATE_REASON  # without: not served

    spaced = NamespacedRepositories(repos, ModelCache(tmp_path / "cache"))
    one, two = (model_key(str(tmp_path / r), "same") for r in ("one", "two"))
    only = model_key(str(tmp_path / "one"), "only_here")
    found = spaced.scan()
    assert sorted(found) == sorted([one, two, only])  # a unique name is keyed too: its key never changes
    for key in (one, two):
        md = found[key]
        assert isinstance(md, ModelDir) and md.key == key and md.name == "same"
        assert md.path == Path(key_namespace(key)) / "same" and key_name(key) == "same"
        looked_up = spaced.find(key)
        assert isinstance(looked_up, ModelDir) and looked_up.key == key
    assert spaced.keys("same") == sorted([one, two]) and spaced.keys(one) == [one]
    assert (
        spaced.keys("nowhere") == ["nowhere"] and spaced.find(model_key(str(tmp_path / "one"), "x")) is None
    )
    assert sorted(spaced.fingerprints(lambda p: ((str(p), 0, 0),))) == sorted([one, two, only])
    assert spaced.names() == sorted([one, two, only])


def test_store_down_is_unreadable_under_its_url_and_recovers(tmp_path: Path) -> None:
    local = tmp_path / "local"
    (local / "here" / "1").mkdir(parents=True)
    store = FakeStore()
    model_files(store, "a")
    store.down = True
    rs = repo_set(tmp_path, store, local)
    found = rs.scan()
    assert isinstance(found["here"], ModelDir)  # the local repository is unaffected
    failure = found["s3://bucket/models"]
    assert isinstance(failure, Unreadable)
    assert failure.reason.startswith("failed to read model repository 's3://bucket/models': ")
    assert rs.failures == {"s3://bucket/models": failure.reason}
    find = rs.find("a")
    assert isinstance(find, Unreadable) and "s3://bucket/models" in find.reason
    assert rs.names() == ["here"]
    assert rs.recovered() == []  # still down
    store.down = False
    assert list(rs.fingerprints(lambda p: ())) == ["a", "here"]
    assert rs.recovered() == ["s3://bucket/models"]
    assert rs.names() == ["a", "here"]


def test_fingerprints_come_from_the_listing(tmp_path: Path) -> None:
    store = FakeStore()
    model_files(store, "a")
    model_files(store, "b")
    rs = repo_set(tmp_path, store)
    rs.scan()
    downloads = store.downloads
    first = rs.fingerprints(lambda p: ())
    assert rs.fingerprints(lambda p: (), relist=False) == first
    store.put("a/config.pbtxt", b'name: "a"\nbackend: "python"\nmax_batch_size: 2\n')
    second = rs.fingerprints(lambda p: ())
    assert second["a"] != first["a"] and second["b"] == first["b"]
    assert store.downloads == downloads  # noticed without downloading
    # the store goes away: its models keep their last marks (neither reloaded nor unloaded)
    store.down = True
    assert rs.fingerprints(lambda p: ()) == second
    assert "s3://bucket/models" in rs.failures
    # a model removed from the store leaves the marks
    store.down = False
    del store.objects["b/config.pbtxt"], store.objects["b/1/model.py"]
    assert list(rs.fingerprints(lambda p: ())) == ["a"]


def test_find_fetches_only_that_model(tmp_path: Path) -> None:
    store = FakeStore()
    model_files(store, "a")
    model_files(store, "b")
    rs = repo_set(tmp_path, store)
    entry = rs.find("a")
    assert isinstance(entry, ModelDir) and entry.name == "a"
    assert store.downloads == 2
    assert rs.find("nope") is None
    # the same listing again: the cached folder, no download
    assert rs.find("a") == entry and store.downloads == 2


def test_fetch_failure_is_unreadable_model(tmp_path: Path) -> None:
    store = FakeStore()
    model_files(store, "a")

    def broken(obj: StoredObject, dest: Path) -> None:
        raise UnavailableError("AccessDenied: Access Denied")

    store.download = broken  # type: ignore[method-assign]
    found = repo_set(tmp_path, store).scan()
    entry = found["a"]
    assert isinstance(entry, Unreadable)
    assert entry.reason == "failed to fetch 'a' from 's3://bucket/models': AccessDenied: Access Denied"


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_sdk(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith(("boto3", "botocore", "azure", "google.cloud")):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sdk)
    from inferd.repository.remote import open_store

    with pytest.raises(InvalidArgumentError, match=r"install inferd\[s3\]"):
        open_store(StoreURL("s3", "b"))
    with pytest.raises(InvalidArgumentError, match=r"install inferd\[azure\]"):
        open_store(StoreURL("as", "c", account="a"))
    with pytest.raises(InvalidArgumentError, match=r"install inferd\[gcs\]"):
        open_store(StoreURL("gs", "b"))


def test_gcs_store_without_credentials_reads_anonymously(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("google.cloud.storage")
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    from inferd.repository.gcs import GCSStore

    def no_credentials(*args: Any, **kwargs: Any) -> Any:
        raise DefaultCredentialsError("no default credentials")

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setattr(google.auth, "default", no_credentials)
    from google.auth.credentials import AnonymousCredentials

    store = GCSStore(StoreURL("gs", "public-bucket", "models"))
    assert isinstance(store._client._credentials, AnonymousCredentials)


def test_gcs_store_error_is_the_last_retrys_cause() -> None:
    pytest.importorskip("google.cloud.storage")
    from google.api_core.exceptions import NotFound, RetryError

    from inferd.repository.gcs import GCSStore

    assert GCSStore._error(NotFound("GET /b/x/o: bucket does not exist\nmore")).message == (
        "404 NotFound: GET /b/x/o: bucket does not exist"
    )
    retried = RetryError("Timeout of 10.0s exceeded", ConnectionError("connection refused"))
    assert GCSStore._error(retried).message == "ConnectionError: connection refused"


def test_s3_store_errors_name_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("boto3")
    from inferd.repository.s3 import S3Store

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE123")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-key-42")
    store = S3Store(StoreURL("s3", "b", endpoint="http://127.0.0.1:9"))

    class Boom(Exception):
        response = {
            "Error": {"Code": "SignatureDoesNotMatch", "Message": "bad very-secret-key-42 AKIDEXAMPLE123"}
        }

    text = store._error(Boom()).message
    assert text == "SignatureDoesNotMatch: bad *** ***"
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in text
