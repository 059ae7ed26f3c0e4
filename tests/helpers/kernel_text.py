"""What a compiled object holds: its FMA instructions, read with objdump (test_fp_contract,
test_host_lanes)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

FMA_INSN = re.compile(r"\bv?f(?:n)?m(?:add|sub|addsub|subadd)\d*[ps][sdh]\b")


def fma_instructions(path) -> list[str]:
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump not found: the machine code cannot be read")
    asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True,
                         text=True, timeout=120).stdout
    assert "ret" in asm, f"objdump read nothing from {path}"
    return sorted(set(FMA_INSN.findall(asm)))
