"""Instruction counts of our tensor-core kernels from their SASS (cuobjdump), without running anything: for
each kernel whose name matches, the instructions in its code and, for the recurrence, in one event (from the
barrier before its first ldmatrix to the barrier after its last mma, including the branches an event takes
only now and then, such as the progress store every 16 chunks), by opcode: where an event's instructions
go. Compare two builds to see what a change did before timing it.

    python3 experiments/perf/tools/sass_count.py build/kernels/libsgdn_cuda_capi.so [KERNEL_REGEX] [--top N]

cuobjdump comes with the CUDA toolkit (or CUOBJDUMP=/path/to/cuobjdump).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def kernels(sass_text):
    """{mangled kernel name: [instruction text, ...]} in code order."""
    out, current = {}, None
    for line in sass_text.splitlines():
        named = re.search(r"Function : (\S+)", line)
        if named:
            current = named.group(1)
            out[current] = []
            continue
        m = INSTRUCTION.match(line)
        if current and m:
            out[current].append(m.group(1))
    return out


def opcode(instruction):
    """The opcode without predicate and modifiers: '@!P0 LDSM.16.M88.4 R4, [R2]' -> 'LDSM'."""
    text = re.sub(r"^@!?U?P[0-9T]+\s+", "", instruction)
    return text.split()[0].split(".")[0]


def event_segment(code):
    """The recurrence's event: from the barrier before the first LDSM to the barrier after the last HMMA."""
    first_ldsm = next((i for i, x in enumerate(code) if opcode(x) == "LDSM"), None)
    last_hmma = max((i for i, x in enumerate(code) if opcode(x) == "HMMA"), default=None)
    if first_ldsm is None or last_hmma is None:
        return None
    start = max((i for i in range(first_ldsm) if opcode(code[i]) == "BAR"), default=first_ldsm)
    end = next((i for i in range(last_hmma, len(code)) if opcode(code[i]) == "BAR"), len(code) - 1)
    return code[start:end + 1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary", help="a shared library, executable or cubin holding the kernels")
    parser.add_argument("kernel", nargs="?", default="tc", help="regular expression on the mangled name")
    parser.add_argument("--top", type=int, default=12, help="opcodes listed per kernel")
    args = parser.parse_args()
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary}: no such file")
    try:
        sass = subprocess.run([tool, "-sass", args.binary], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.exit(f"cuobjdump ({tool}) failed on {args.binary}: {exc}")
    found = {name: code for name, code in kernels(sass).items() if re.search(args.kernel, name)}
    if not found:
        sys.exit(f"no kernel in {args.binary} matches '{args.kernel}'")
    for name, code in found.items():
        short = re.sub(r"^_ZN4sgdn4cuda\d+_GLOBAL__N__\w+?_cu_\w+?\d+tc\d+", "tc::", name)
        print(f"{short}: {len(code)} instructions")
        if "recurrence" in name:
            segment = event_segment(code)
            if segment:
                counts = collections.Counter(opcode(x) for x in segment)
                top = ", ".join(f"{op} {n}" for op, n in counts.most_common(args.top))
                print(f"  one event: {len(segment)} instructions per warp ({top})")


if __name__ == "__main__":
    main()
