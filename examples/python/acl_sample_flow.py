#!/usr/bin/env python3
"""The AscendCL sample flow in pyACL's style, on Kiln's low-level modules (docs/python.md).

    python3 acl_sample_flow.py model.kiln [--inputs a.npy b.npy] [--outputs-dir DIR] [--device 0]

init -> set_device -> create_context -> create_stream -> load_from_file -> get_desc ->
one device buffer per input and output -> datasets -> memcpy host to device -> execute ->
memcpy device to host -> release everything in reverse order -> finalize. A pyACL program
ports by `import kiln as acl` (plus the names of docs/porting.md). Inputs are random unless
given as .npy files; outputs are printed and, with --outputs-dir, saved as out<i>.npy.
"""

import argparse
import os
import sys

import numpy as np

import kiln as acl

MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2
MALLOC_HUGE_FIRST = 0

# kiln data types (AscendCL's numbering) -> numpy; bf16 travels as uint16 bits.
NP_TYPES = {0: np.float32, 1: np.float16, 2: np.int8, 3: np.int32, 4: np.uint8, 6: np.int16, 7: np.uint16,
            8: np.uint32, 9: np.int64, 10: np.uint64, 11: np.float64, 12: np.bool_, 27: np.uint16}


def check(ret, what):
    """pyACL's habit: every call returns a code; stop at the first failure with its message."""
    if ret != 0:
        raise RuntimeError(f"{what} failed with {ret}: {acl.get_recent_err_msg()}")


class Model:
    def __init__(self, path, device_id):
        self.device_id = device_id
        check(acl.init(), "acl.init")
        check(acl.rt.set_device(device_id), "acl.rt.set_device")
        self.context, ret = acl.rt.create_context(device_id)
        check(ret, "acl.rt.create_context")
        self.stream, ret = acl.rt.create_stream()
        check(ret, "acl.rt.create_stream")
        self.model_id, ret = acl.mdl.load_from_file(path)
        check(ret, "acl.mdl.load_from_file")
        self.desc = acl.mdl.create_desc()
        check(acl.mdl.get_desc(self.desc, self.model_id), "acl.mdl.get_desc")
        self.inputs = self._make_dataset(acl.mdl.get_num_inputs(self.desc), acl.mdl.get_input_size_by_index,
                                         acl.mdl.get_input_dims, acl.mdl.get_input_data_type)
        self.outputs = self._make_dataset(acl.mdl.get_num_outputs(self.desc), acl.mdl.get_output_size_by_index,
                                          acl.mdl.get_output_dims, acl.mdl.get_output_data_type)

    def _make_dataset(self, count, size_of, dims_of, type_of):
        """A dataset of `count` device buffers; returns (dataset, [(ptr, size, dims, dtype, buffer)])."""
        dataset = acl.mdl.create_dataset()
        entries = []
        for i in range(count):
            size = size_of(self.desc, i)
            dims, ret = dims_of(self.desc, i)
            check(ret, "acl.mdl.get_*_dims")
            ptr, ret = acl.rt.malloc(size, MALLOC_HUGE_FIRST)
            check(ret, "acl.rt.malloc")
            buffer = acl.create_data_buffer(ptr, size)
            _, ret = acl.mdl.add_dataset_buffer(dataset, buffer)
            check(ret, "acl.mdl.add_dataset_buffer")
            entries.append((ptr, size, dims, NP_TYPES[type_of(self.desc, i)], buffer))
        return dataset, entries

    def run(self, arrays):
        dataset, entries = self.inputs
        for array, (ptr, size, _, dtype, _) in zip(arrays, entries):
            array = np.ascontiguousarray(array, dtype=dtype)
            check(acl.rt.memcpy(ptr, size, acl.util.numpy_to_ptr(array), array.nbytes, MEMCPY_HOST_TO_DEVICE),
                  "acl.rt.memcpy")
        check(acl.mdl.execute(self.model_id, dataset, self.outputs[0]), "acl.mdl.execute")
        results = []
        for ptr, size, dims, dtype, _ in self.outputs[1]:
            host = np.empty(dims["dims"], dtype)
            check(acl.rt.memcpy(acl.util.numpy_to_ptr(host), host.nbytes, ptr, size, MEMCPY_DEVICE_TO_HOST),
                  "acl.rt.memcpy")
            results.append(host)
        return results

    def release(self):
        for dataset, entries in (self.inputs, self.outputs):
            for ptr, _, _, _, buffer in entries:
                check(acl.destroy_data_buffer(buffer), "acl.destroy_data_buffer")
                check(acl.rt.free(ptr), "acl.rt.free")
            check(acl.mdl.destroy_dataset(dataset), "acl.mdl.destroy_dataset")
        check(acl.mdl.unload(self.model_id), "acl.mdl.unload")
        check(acl.mdl.destroy_desc(self.desc), "acl.mdl.destroy_desc")
        check(acl.rt.destroy_stream(self.stream), "acl.rt.destroy_stream")
        check(acl.rt.destroy_context(self.context), "acl.rt.destroy_context")
        check(acl.rt.reset_device(self.device_id), "acl.rt.reset_device")
        check(acl.finalize(), "acl.finalize")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a .kiln offline model (kiln compile m.onnx -o m.kiln)")
    parser.add_argument("--inputs", nargs="*", default=[], help="one .npy per model input (random if absent)")
    parser.add_argument("--outputs-dir", help="save the outputs as out<i>.npy here")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()

    model = Model(args.model, args.device)
    rng = np.random.default_rng(0)
    arrays = []
    for i, (_, _, dims, dtype, _) in enumerate(model.inputs[1]):
        if i < len(args.inputs):
            arrays.append(np.load(args.inputs[i]))
        else:
            arrays.append(rng.standard_normal(dims["dims"]).astype(dtype))
    outputs = model.run(arrays)
    for i, out in enumerate(outputs):
        name = acl.mdl.get_output_name_by_index(model.desc, i)
        print(f"output {i} '{name}': {out.dtype} {list(out.shape)} first {out.reshape(-1)[:4].tolist()}")
        if args.outputs_dir:
            os.makedirs(args.outputs_dir, exist_ok=True)
            np.save(os.path.join(args.outputs_dir, f"out{i}.npy"), out)
    model.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
