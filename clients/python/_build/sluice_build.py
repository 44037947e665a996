"""A PEP 517 build backend for the sluice client, standard library only.

It packs sluice/*.py into a pure-Python wheel (or an sdist) with the
version read from sluice/_version.py, so installing needs no setuptools and
no network. PEP 660 editable installs are a .pth file pointing here.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "sluice"


def _version():
    with open(os.path.join(ROOT, NAME, "_version.py")) as f:
        return re.search(r'(?m)^__version__ = "([^"]+)"$', f.read()).group(1)


def _metadata():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: Run Claude API jobs on every key at once from "
            "Python, over the sluice binary\nRequires-Python: >=3.9\nDescription-Content-Type: text/markdown\n\n%s"
            % (NAME, _version(), readme))


def _sources():
    pkg = os.path.join(ROOT, NAME)
    return sorted("%s/%s" % (NAME, f) for f in os.listdir(pkg) if f.endswith(".py"))


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _wheel(wheel_directory, files):
    dist = "%s-%s.dist-info" % (NAME, _version())
    files = dict(files)
    files[dist + "/METADATA"] = _metadata().encode()
    files[dist + "/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: sluice_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [_record_line(p, d) for p, d in files.items()] + [dist + "/RECORD,,"]
    files[dist + "/RECORD"] = ("\n".join(record) + "\n").encode()
    name = "%s-%s-py3-none-any.whl" % (NAME, _version())
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files.items():
            z.writestr(zipfile.ZipInfo(p, (2020, 1, 1, 0, 0, 0)), d)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    for p in _sources():
        with open(os.path.join(ROOT, p), "rb") as f:
            files[p] = f.read()
    return _wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {NAME + "_editable.pth": (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for p in ["pyproject.toml", "README.md", "_build/sluice_build.py"] + _sources():
            t.add(os.path.join(ROOT, p), arcname="%s/%s" % (base, p))
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
