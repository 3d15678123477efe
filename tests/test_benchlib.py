"""The GPU benchmark's pure-Python parts (experiments/perf/benchlib.py), checked without a GPU or torch."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments", "perf"))
import benchlib  # noqa: E402


class BenchlibTest(unittest.TestCase):
    def test_layouts(self):
        names = [l[1] for l in benchlib.LAYOUTS]
        for name in ("1x2K", "1x4K", "1x128K", "4x8K", "2x16K", "32x1K", "8x4K", "ragged5"):
            self.assertIn(name, names)
        for T, name, lengths in benchlib.LAYOUTS:
            self.assertEqual(T, sum(lengths), name)
        self.assertEqual(benchlib.layout("ragged5")[2], [3000, 500, 12000, 7000, 9268])
        self.assertEqual(benchlib.layout("32x1K")[2], [1024] * 32)
        self.assertEqual(benchlib.layout("5000"), (5000, "5000", [5000]))
        self.assertRaisesRegex(benchlib.UsageError, "known: 1x2K", benchlib.layout, "3x3K")
        self.assertEqual([l[1] for l in benchlib.choose_layouts("2x16K,1x4K")], ["2x16K", "1x4K"])
        self.assertEqual([l[1] for l in benchlib.choose_layouts(quick=True)], benchlib.QUICK_LAYOUTS)
        self.assertEqual(len(benchlib.choose_layouts()), len(benchlib.LAYOUTS))

    def test_configs(self):
        self.assertEqual(list(benchlib.choose_configs()), ["dense", "sparse-default", "sparse-cap0.4"])
        self.assertEqual(benchlib.choose_configs("sparse-G2")["sparse-G2"]["group"], 2)
        self.assertRaisesRegex(benchlib.UsageError, "unknown configuration nope", benchlib.choose_configs, "dense,nope")

    def test_libs(self):
        self.assertEqual(benchlib.parse_libs(None), [])
        self.assertEqual(benchlib.parse_libs(["old=/a/lib.so", "new=/b/lib.so"]),
                         [("old", "/a/lib.so"), ("new", "/b/lib.so")])
        self.assertEqual(benchlib.parse_libs(["/a/lib.so"]), [("lib1", "/a/lib.so")])
        self.assertRaisesRegex(benchlib.UsageError, "given twice", benchlib.parse_libs, ["a=/x", "a=/y"])
        self.assertRaisesRegex(benchlib.UsageError, "NAME=PATH", benchlib.parse_libs, ["a="])

    def test_modules(self):
        self.assertEqual(benchlib.parse_modules(None, ["old"]), {})
        self.assertEqual(benchlib.parse_modules(["old=/src/kernels/python"], ["old", "new"]),
                         {"old": "/src/kernels/python"})
        self.assertRaisesRegex(benchlib.UsageError, "no --lib is named x", benchlib.parse_modules, ["x=/d"], ["old"])
        self.assertRaisesRegex(benchlib.UsageError, "NAME=DIR", benchlib.parse_modules, ["old"], ["old"])

    def test_gpu_model(self):
        cases = {"NVIDIA H100 80GB HBM3": "h100", "NVIDIA H200": "h200", "NVIDIA H100 PCIe": "h100",
                 "NVIDIA A100-SXM4-40GB": "a100", "NVIDIA GeForce RTX 4090": "rtx4090", "NVIDIA L40S": "l40s",
                 "NVIDIA GH200 480GB": "gh200", "Tesla T4": "tesla-t4"}
        for name, model in cases.items():
            self.assertEqual(benchlib.gpu_model(name), model, name)
        self.assertEqual(benchlib.result_name("h100", False), "h100")
        self.assertEqual(benchlib.result_name("h100", True), "h100_subset")
        self.assertEqual(benchlib.result_name("h100", True, "mine"), "mine")

    def test_markdown(self):
        self.assertEqual(benchlib.ratio(1.0, 0.5), 2.0)
        self.assertIsNone(benchlib.ratio(None, 0.5))
        meta = {"device": "NVIDIA H200", "date": "d", "versions": {"torch": "2"}, "libs": {"ours": "/x.so"},
                "method": "m", "shape": {"ours_out_dtype": "bfloat16"}}
        rows = [{"layout": "1x4K", "config": "dense", "lib": "ours", "ours_ms": 0.2, "fla_ms": 0.3, "qla_ms": None,
                 "speedup": 1.5, "speedup_vs_qla": None, "ours_bytes": 2**20}]
        text = benchlib.markdown(meta, rows, ["cmd"])
        table = [l for l in text.splitlines() if l.startswith("|")]
        self.assertEqual(len(table), 3)
        widths = {l.count("|") for l in table}
        self.assertEqual(len(widths), 1, table)  # header, rule and rows have the same number of cells
        self.assertIn("| 1x4K | dense | ours | 0.200 | 0.300 |  |  | 1.50 |  | 1 |", text)
        self.assertIn("    cmd\n", text)

    def test_merge(self):
        run = lambda layout, date, cmd, device="NVIDIA H200": {
            "device": device, "date": date, "commands": [cmd],
            "rows": [{"layout": layout, "config": "dense", "lib": "ours"}]}
        merged = benchlib.merge_results([run("1x4K", "d1", "a"), run("4x8K", "d2", "b")])
        self.assertEqual([r["layout"] for r in merged["rows"]], ["1x4K", "4x8K"])
        self.assertEqual(merged["commands"], ["a", "b"])
        self.assertEqual(merged["date"], "d1 .. d2")
        two_libs = run("1x4K", "d", "a")
        two_libs["rows"].append({"layout": "1x4K", "config": "dense", "lib": "old"})
        self.assertEqual([r["lib"] for r in benchlib.merge_results([two_libs], "ours")["rows"]], ["ours"])
        self.assertRaisesRegex(benchlib.UsageError, "no rows of the library x", benchlib.merge_results,
                               [two_libs], "x")
        self.assertRaisesRegex(benchlib.UsageError, "different cards", benchlib.merge_results,
                               [run("1x4K", "d", "a"), run("4x8K", "d", "b", "NVIDIA H100")])
        self.assertRaisesRegex(benchlib.UsageError, "more than one file", benchlib.merge_results,
                               [run("1x4K", "d", "a"), run("1x4K", "d", "b")])


if __name__ == "__main__":
    unittest.main()
