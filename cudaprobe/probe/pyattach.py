"""--py-stacks on the loader's side: tell the probes where interpreters are.

Two ways (bpf/pystacks.bpf.h): an interpreter executable in `py_exes`, so that
a process that runs it is found at its first call, however soon after its
start (a command launched, its children); and a running process in
`py_procs` (--pid), found from its maps. The versions' layouts go in
`py_layouts` (and `layouts`, which decode.pystacks reads the side records
with). What cannot be read (a version without a layout, an interpreter the
probes cannot find, a version before 3.12 on a kernel without may_goto, where
the probes cannot tell a code object from one that took its memory) is said
once, and its calls have no stack.
"""

from __future__ import annotations

import glob
import os
import shutil
from typing import Any, Callable

from cudaprobe.errors import CudaprobeError
from cudaprobe.probe import pyrecords as pr
from cudaprobe.targets import procmaps, pyelf
from cudaprobe.targets.pyoffsets import Layout

USER_GEN = 1 << 63  # gens the loader gives (the probes use the clock, below 2^63)


class PyStackProbe:
    """Fills the py_* maps of a loaded program; splits the side records out."""

    def __init__(self, bpf: Any, notify: Callable[[str], None] = print,
                 hashes: bool = True) -> None:
        self._bpf = bpf
        self.notify = notify
        # the program hashes code objects (CP_MAY_GOTO): versions without co_version
        self.hashes = hashes
        # index in py_layouts -> (version, layout): how the side records read
        self.layouts: list[tuple[tuple[int, int], Layout]] = []
        self._exes: set[tuple[int, int]] = set()
        self._said: set[str] = set()
        self._gen = 0

    def _layout_index(self, image: pyelf.PyImage) -> int | None:
        assert image.layout is not None and image.version is not None
        entry = (image.version, image.layout)
        if entry not in self.layouts:
            if len(self.layouts) >= pr.LAYOUTS:
                return None
            table = self._bpf["py_layouts"]
            table[table.Key(len(self.layouts))] = table.Leaf(*image.layout.bpf_values())
            self.layouts.append(entry)
        return self.layouts.index(entry)

    def _say_once(self, path: str, why: str) -> None:
        if path not in self._said:
            self._said.add(path)
            self.notify(f"--py-stacks: {path}: {why}: its calls have no Python stack")

    def _unreadable(self, image: pyelf.PyImage) -> bool:
        if image.readable:
            return False
        v = ".".join(map(str, image.version)) if image.version else "an unknown version"
        self._say_once(image.path, f"CPython {v} is not one cudaprobe can read")
        return True

    def _untold(self, image: pyelf.PyImage) -> bool:
        """A version whose code objects only a hash tells apart, where the program
        has none (a kernel without may_goto)."""
        if self.hashes or image.layout is None or image.layout.code_version >= 0:
            return False
        v = ".".join(map(str, image.version or ()))
        self._say_once(image.path, f"CPython {v} needs Linux 6.9 or later (may_goto) for the "
                                   f"probes to tell each code object from one freed before it")
        return True

    def add_executable(self, path: str, quiet: bool = False) -> None:
        """An interpreter executable: processes running it are found at their first
        call. `quiet`: one that may never run, nothing said if it cannot be read."""
        image = pyelf.read_image(path)
        if image is None or (quiet and not pyelf.exe_entry(image)):
            return
        found = pyelf.exe_entry(image)
        if found is None:
            if not (image.needs_libpython and self._unreadable(
                    pyelf.read_image(image.needs_libpython) or image)):
                self._unreadable(image)
            return
        holder, fields = found
        if self._unreadable(holder) or self._untold(holder):
            return
        index = self._layout_index(holder)
        st = os.stat(image.path)
        key = (pyelf.kernel_dev(st.st_dev), st.st_ino)
        if index is None or key in self._exes:
            return
        self._exes.add(key)
        table = self._bpf["py_exes"]
        table[table.Key(*key)] = table.Leaf(*fields, index, 0)

    def add_command(self, argv: list[str]) -> None:
        """A command about to start: its program, or the interpreter its script
        names, and the pythons on PATH (a pyenv shim runs one of pyenv's)."""
        found = shutil.which(argv[0]) if argv else None
        paths = [found] if found else []
        if found:
            try:
                with open(found, "rb") as f:
                    head = f.readline(256)
            except OSError:
                head = b""
            if head.startswith(b"#!"):
                words = head[2:].decode("utf-8", "replace").split()
                if words and os.path.basename(words[0]) == "env" and len(words) > 1:
                    words = [shutil.which(words[1]) or words[1]]
                paths += words[:1]
        for path in dict.fromkeys(paths):
            self.add_executable(path)
        others = [p for p in (shutil.which("python3"), shutil.which("python")) if p]
        if any("/shims/" in p for p in [*paths, *others]):
            root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
            others += glob.glob(f"{root}/versions/*/bin/python3.*[0-9]")
        for path in dict.fromkeys(others):
            self.add_executable(path, quiet=True)

    def add_process(self, pid: int) -> None:
        """A running process (--pid): its interpreter from its maps, if it has one,
        each file read through its mapping (procmaps), never by the name the
        process gave it."""
        try:
            lines = procmaps.map_lines(pid)
            files = procmaps.read_maps(pid)
        except CudaprobeError:
            return
        for mapped in files:
            try:
                image = pyelf.read_image(mapped.open())
            except CudaprobeError:
                continue
            if image is None or not image.runtime:
                continue
            if self._unreadable(image) or self._untold(image):
                return
            base = self._load_base(lines, mapped, image)
            index = self._layout_index(image)
            if base is None or index is None:
                return
            self._gen += 1
            table = self._bpf["py_procs"]
            table[table.Key(pid)] = table.Leaf(base + image.runtime, base + image.code_type,
                                               USER_GEN | self._gen, index, pr.FOUND)
            self._add_process_exe(pid, files, image, index)
            return

    def _add_process_exe(self, pid: int, files: list[procmaps.MappedFile],
                         holder: pyelf.PyImage, index: int) -> None:
        """The running interpreter's executable into `py_exes` too, read through
        its mapping: a child it forks, or one that execs the same interpreter
        (multiprocessing's spawn, a DataLoader worker), is found at its first
        call, as a launched command's children are."""
        try:
            st = os.stat(f"/proc/{pid}/exe")  # the kernel's own link: the file it runs
        except OSError:
            return
        exe = next((f for f in files if f.identity[1] == st.st_ino), None)
        if exe is None:
            return
        try:
            opened = exe.open()
            image = pyelf.read_image(opened)
        except CudaprobeError:
            return
        if image is None:
            return
        if image.readable and image.runtime == holder.runtime:  # the runtime is in it
            fields = (image.text_vaddr, 0, 0, image.runtime, image.code_type)
        elif image.debug_at and holder.readable:  # in a libpython it loads
            fields = (image.text_vaddr, image.debug_at, holder.dynamic, holder.runtime,
                      holder.code_type)
        else:
            return
        key = (pyelf.kernel_dev(opened.stat.st_dev), opened.stat.st_ino)
        if key not in self._exes:
            self._exes.add(key)
            table = self._bpf["py_exes"]
            table[table.Key(*key)] = table.Leaf(*fields, index, 0)

    @staticmethod
    def _load_base(lines: list[procmaps.MapLine], mapped: procmaps.MappedFile,
                   image: pyelf.PyImage) -> int | None:
        """The load bias of the file: where its file offset 0 is mapped, less the
        address it was linked for (0 for a shared object or a PIE)."""
        m = mapped.mapped
        for line in lines:
            if (line.major, line.minor, line.inode) == (m.major, m.minor, m.inode) \
                    and line.offset == 0:
                return line.start - image.load_vaddr
        return None
