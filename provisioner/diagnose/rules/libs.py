"""missing_shared_lib: a library the loader cannot find or that has the wrong version."""

from __future__ import annotations

from provisioner.diagnose.model import Rule
from provisioner.diagnose.rules.common import CONTAINER_CONTEXT, GPU_PV_GUEST, RUNTIME_CONTEXT, WSL_CONTEXT

RULES: tuple[Rule, ...] = (
    Rule(
        name="lib.cannot_open_shared_object",
        category="missing_shared_lib",
        patterns=(
            r"not found in any environmental path",
            r"CUDA Setup failed despite GPU being available",
            r"cuDNN version incompatibility: PyTorch was compiled against",
            r"Could not load symbol \w+ from lib",
            r"lib[\w.+-]*\.so[\d.]*: cannot open shared object file",
            r"error while loading shared libraries",
            r"Could not load (?:dynamic )?library '?lib[\w.+-]*\.so",
            r"Unable to load any of \{lib",
            r"Could not load library lib[\w.+-]*\.so",
            # a reporter's words for the loader's failure ("'libnvrtc.so.10.1' can not be loaded", openmm/openmm#2760)
            r"lib[\w+-]*\.so[\d.]*['\"`]?(?: and ['\"`]?lib[\w+-]*\.so[\d.]*['\"`]?)? (?:can ?not|could not|couldn't|"
            r"can't) be (?:loaded|found)",
        ),
        confidence=0.85,
        root_cause="A required shared library[ ({library})] is not installed or not on the loader path.",
        fix=(
            "Install the package that provides the missing library[ ({library})] in the same CUDA major as the rest "
            "of the stack "
            "(e.g. the nvidia-*-cu12 wheels, or the matching cu12x/cu11x build of the extension), or fix "
            "LD_LIBRARY_PATH."
        ),
        examples=("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",),
    ),
    Rule(
        # torch's PyPI builds (2.0+) load CUDA from the nvidia-*-cuXX wheels they depend on; a resolver that took
        # another platform's metadata (poetry, pdm), an `--no-deps` install or a pruned image leaves them out
        name="lib.torch_cuda_wheels_missing",
        category="missing_shared_lib",
        patterns=(),
        messages=("torch.preload_cuda_deps",),
        # the loader names a library (its glob: "libnvrtc.so.*[0-9].*[0-9]"), not any program ("ffmpeg not found …")
        requires=(r"_preload_cuda_deps|\blib[\w*\[\].-]*\.so[\w*\[\].-]*\s+not found in the system path",),
        confidence=0.88,
        root_cause=("This torch loads its CUDA libraries from the nvidia-* wheels it depends on[ ({library})], and they "
                    "are not installed in the environment (a resolver or lock file that left torch's dependencies out, "
                    "`--no-deps`, or an image that removed them)."),
        fix=("Install torch with its dependencies from one resolver run (`pip install --force-reinstall torch==<v>` or "
             "`uv pip install torch==<v>` resolves the nvidia-*-cuXX wheels); with poetry/pdm, lock torch from the "
             "PyTorch index for this platform, or add the nvidia-* packages its metadata lists."),
        examples=(
            # pytorch/pytorch#100974 (poetry and torch 2.0.1)
            "ValueError: libnvrtc.so.*[0-9].*[0-9] not found in the system path ['/app', '/usr/lib/python310.zip']",
        ),
    ),
    Rule(
        # NVML's NVML_ERROR_OPERATING_SYSTEM in a Hyper-V GPU-PV guest whose dxgkrnl module loaded: the kernel side of
        # GPU paravirtualization works, the user-mode side (WSL's libdxcore/libd3d12 and the Windows driver store's
        # NVIDIA libraries, copied into /usr/lib/wsl) is incomplete (seflerZ/oneclick-gpu-pv#8: copied from
        # System32\lxss\lib, which lacks libd3d12.so, libd3d12core.so and libdxcore.so; staralt/dxgkrnl-dkms#7)
        name="lib.gpu_pv_userspace_incomplete",
        category="missing_shared_lib",
        patterns=(),
        messages=("nvml.operating_system",),
        requires=(GPU_PV_GUEST,),
        unless=WSL_CONTEXT + "|" + CONTAINER_CONTEXT,
        confidence=0.85,
        root_cause=("This Hyper-V GPU-PV guest's dxgkrnl module is loaded, and NVML is blocked because the user-mode "
                    "side of GPU paravirtualization is incomplete: WSL's libraries (libdxcore.so, libd3d12.so, "
                    "libd3d12core.so) or the Windows driver store's NVIDIA libraries are missing from /usr/lib/wsl."),
        fix=("Copy the whole user-mode set from the Windows host: a WSL 2 install's /usr/lib/wsl/lib (or C:\\Program "
             "Files\\WSL\\lib; System32\\lxss\\lib lacks the D3D12 and dxcore libraries) into /usr/lib/wsl/lib (libdxcore.so, libd3d12.so, libd3d12core.so), and the "
             "NVIDIA folder of C:\\Windows\\System32\\DriverStore\\FileRepository (nv_dispi.inf_amd64_*) into "
             "/usr/lib/wsl/drivers; then `ldconfig` and `nvidia-smi`."),
        examples=("[    2.404359] dxgkrnl: loading out-of-tree module taints kernel.\n[    2.410266] hv_vmbus: registering "
                  "driver dxgkrnl\nFailed to initialize NVML: GPU access blocked by the operating system",),
    ),
    Rule(
        # XLA's and TensorFlow's stream executor refuse a cuDNN the build cannot use (cuda_dnn.cc): with pip-installed
        # CUDA wheels, most often another package's pin on nvidia-cudnn-cuXX, or a system/conda libcudnn found first on
        # the loader path
        name="lib.cudnn_mismatch_with_build",
        category="missing_shared_lib",
        patterns=(),
        messages=("xla.cudnn_runtime_mismatch",),
        demotes=("driver_too_old", "no_driver_loaded"),
        confidence=0.9,
        root_cause=("The cuDNN loaded at run time is not one JAX/TensorFlow (XLA) can use: it needs the major version "
                    "it was built with and at least its minor (the log names both), so it refuses the library (\"DNN "
                    "library initialization failed\")."),
        fix=("Load a cuDNN of the build's major version and at least its minor: `pip install "
             "\"nvidia-cudnn-cuXX==<major>.*\"` at or above the version the log says the source was compiled with "
             "(or a jax/TensorFlow built for the cuDNN you have), and find what loads another one first — a package's "
             "pin on nvidia-cudnn (torch and jax in one environment share one), a system or conda libcudnn on "
             "LD_LIBRARY_PATH (`python -c \"import ctypes.util; print(ctypes.util.find_library('cudnn'))\"`)."),
        examples=(
            # a JAX report (cuda_dnn.cc:454 in jaxlib 0.4.x)
            "E0430 22:32:43.417007 2493694 cuda_dnn.cc:454] Loaded runtime CuDNN library: 9.1.0 but source was compiled "
            "with: 9.8.0. CuDNN library needs to have matching major version and equal or higher minor version.\n"
            "jax.errors.JaxRuntimeError: FAILED_PRECONDITION: DNN library initialization failed.",
        ),
    ),
    Rule(
        name="lib.symbol_version_not_found",
        category="missing_shared_lib",
        patterns=(r"version `(?:GLIBCXX|GLIBC|CXXABI)_[\d.]+' not found",),
        confidence=0.88,
        root_cause="The loader picked a libstdc++/glibc older than the one the binary needs[ ({library})].",
        fix=(
            "Use the environment's own newer libstdc++ (conda: reinstall libstdcxx-ng / fix the libstdc++.so.6 "
            "symlink) or a newer distro/glibc."
        ),
        examples=(
            "ImportError: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by "
            ".../libtorch_python.so)",
        ),
    ),
    Rule(
        name="lib.undefined_symbol",
        category="missing_shared_lib",
        patterns=(r"\.so[\d.]*: undefined symbol: \S+", r"undefined symbol: __nvJitLink", r"version libnvJitLink\.so"),
        confidence=0.7,
        root_cause=(
            "A compiled library was built against a different version of torch/CUDA than the one installed "
            "(undefined symbol)."
        ),
        fix=(
            "Reinstall the extension built for the installed torch and CUDA (or pin torch to the version it was "
            "built for)."
        ),
        examples=(
            "ImportError: "
            "/usr/local/lib/python3.10/dist-packages/torch/lib/../../nvidia/cusparse/lib/libcusparse.so.12: "
            "undefined symbol: __nvJitLinkComplete_12_4, version libnvJitLink.so.12",
        ),
    ),
    Rule(
        name="lib.libcuda_link",
        category="missing_shared_lib",
        patterns=(
            r"cannot find -lcuda\b",
            r"libcuda\.so cannot found",
            r"CUDA driver is a stub library",
            r"cudaErrorStubLibrary",
        ),
        confidence=0.75,
        root_cause=(
            "libcuda.so (the driver's userspace library) is not where the build/JIT expects it, or only the "
            "toolkit's stub is found."
        ),
        fix=(
            "Install the driver userspace (libcuda.so.1) and make sure libcuda.so is on the library path (ldconfig "
            "-p | grep libcuda)."
        ),
        examples=("/usr/bin/ld: cannot find -lcuda: No such file or directory",),
    ),
    Rule(
        name="lib.windows_dll",
        category="missing_shared_lib",
        patterns=(
            r"\[WinError 127\] The specified procedure could not be found",
            r'Error loading \"[^\"\n]+\.dll\" or one of its dependencies',r"DLL load failed while importing", r"\[WinError 126\] The specified module could not be found"),
        confidence=0.7,
        root_cause="A DLL the module depends on could not be loaded.",
        fix="Reinstall torch and its CUDA runtime packages consistently and install the MSVC runtime.",
        examples=("ImportError: DLL load failed while importing _C: The specified module could not be found.",),
    ),
    Rule(
        # nv-codec-headers' loader (dynlink_loader.h) prints `Cannot load <library>` for NVDEC/NVENC; FFmpeg's cuvid
        # decoder then "Failed loading nvcuvid." and its encoder the driver requirement (a consequence: demoted)
        name="libs.video_codec_library_missing",
        category="missing_shared_lib",
        patterns=(r"\bFailed loading nvcuvid\b",),
        messages=("ffnvcodec.video_lib_missing",),
        unless=RUNTIME_CONTEXT,
        demotes=("driver_too_old",),
        confidence=0.85,
        root_cause=("The driver's video codec library ({library}) is not installed: FFmpeg's NVDEC/NVENC cannot load "
                    "it (distributions package it apart from the driver)."),
        fix=("Install the driver's video libraries of the installed driver's version (Debian/Ubuntu: libnvidia-encode-<branch>"
             " and libnvidia-decode-<branch>, or libnvcuvid1/libnvidia-encode1; RHEL: nvidia-driver-cuda-libs), then "
             "check with `ldconfig -p | grep -E 'nvcuvid|nvidia-encode'`. In a docker/Kubernetes container the NVIDIA "
             "runtime mounts them only for NVIDIA_DRIVER_CAPABILITIES including `video`."),
        examples=("[h264_nvenc @ 0x55855d101140] Cannot load libnvidia-encode.so.1",),
    ),
    Rule(
        # glibc's loader (dl-load.c open_verify) on a file that is present but not a shared object: the library
        # is broken, not absent; the runtime or tool that reported "load library failed" only passed it on
        name="libs.library_file_broken",
        category="missing_shared_lib",
        patterns=(r"\blib[\w.+-]*\.so[\w.]*: (?:file too short|invalid ELF header)",),
        messages=("ld.not_an_elf_object", "binutils.file_truncated"),
        # ld's "file truncated" on an object file or a static archive is a build's own output cut short (a parallel
        # make's race, a full disk), not a library the program loads
        unless=r"\.(?:o|a|obj|lo)\s*:\s*file not recognized",
        demotes=("container_device_missing", "no_driver_loaded"),
        confidence=0.85,
        root_cause=("A library file is there but is not a usable shared object (empty, truncated, or not ELF): an "
                    "interrupted copy or install, or a placeholder (an empty bind-mount target, a copied symlink) "
                    "where the real library should be."),
        fix=("Look at the file the loader names (`ls -l`, `file`, `readlink -f`): restore it from its package "
             "(reinstall the driver userspace / the library's package), or in a container or jail bind-mount the "
             "host's real directory instead of single files or links."),
        examples=("nvidia-container-cli: initialization error: load library failed: "
                  "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1: file too short",),
    ),
    Rule(
        # CTranslate2's lazy loader (src/cuda/cublas_stub.cc …): the library of the CUDA major it was built against
        name="libs.ctranslate2_cuda_library",
        category="missing_shared_lib",
        patterns=(r"\bLibrary \S+ is not found or cannot be loaded",),
        messages=("ctranslate2.library_not_loaded",),
        confidence=0.88,
        root_cause=("CTranslate2 (faster-whisper, WhisperX, …) cannot load {library}: the CUDA library of the major "
                    "version this CTranslate2 was built against is not installed or not on the loader's path."),
        fix=("Install the CUDA libraries of the major CTranslate2 was built for (pip: nvidia-cublas-cu12 / "
             "nvidia-cudnn-cu12, or the cu11 ones for an older build) and put their lib directories on "
             "LD_LIBRARY_PATH, or install the CTranslate2 release built for the CUDA you have."),
        examples=("RuntimeError: Library libcublas.so.11 is not found or cannot be loaded",),
    ),
    Rule(
        # the Windows loader (STATUS_ENTRYPOINT_NOT_FOUND): another version of the DLL than the program's was loaded
        name="libs.windows_entry_point_missing",
        category="missing_shared_lib",
        patterns=(r"无法定位程序输入点",),
        messages=("windows.entry_point_not_found",),
        confidence=0.78,
        root_cause=("Windows loaded another version of a DLL than the program was built against ({library}): the "
                    "function the program needs is not in it (two copies on PATH, or an older CUDA/cuDNN install "
                    "found first)."),
        fix=("Find every copy of the DLL (`where <name>.dll`), keep the version the program was built for first on "
             "PATH (or remove the older CUDA/cuDNN bin directory from PATH), or install the build of the program "
             "that matches the installed library."),
        examples=("python.exe- 无法找到入口\n无法定位程序输入点 于动态接库\nD: PaddlePaddleDeepLerning/Anaconda3/envs/paddle/"
                  "Librany/bin/cudnn_adv_infer64_8.dll 上",),  # PaddlePaddle/PaddleOCR#8829
    ),
    Rule(
        # NixOS keeps the driver's userspace (libcuda, libnvidia-ml) under /run/opengl-driver/lib, in no loader path: a
        # program from nixpkgs finds it only when patched for it (addDriverRunpath / autoAddDriverRunpath), one built in
        # a nix shell only with that path in LD_LIBRARY_PATH (NixOS/nixpkgs#209416: atop's GPU daemon through pynvml;
        # a nix-shell build of nvtop)
        name="lib.nixos_driver_runpath",
        category="missing_shared_lib",
        patterns=(r"\blib(?:cuda|nvidia-ml)\.so(?:\.1)?[\"'`]?:? (?:cannot open shared object file|not found)",
                  r"\bCannot load libcuda\.so(?:\.1)?\b"),
        messages=("nvml.library_not_found", "atop.nvml_init_failed"),
        context=r"/nix/store/|\bNixOS\b|\bnix-shell\b|\bnix (?:develop|shell|run)\b|/run/opengl-driver",
        # the driver itself absent or not loaded (its module missing, nvidia-smi failing, torch finding no driver):
        # that finding, not the path
        unless=(r"couldn't communicate with the NVIDIA driver|Module nvidia\S* not found|Found no NVIDIA driver"
                r"|NVIDIA kernel module\S* (?:is )?not (?:loaded|found)|No NVIDIA GPU found|Driver Not Loaded"),
        confidence=0.85,
        root_cause=("The driver's libraries (libcuda.so.1, libnvidia-ml.so.1) are outside this nix-built program's "
                    "search path: on NixOS they are under /run/opengl-driver/lib, which the loader does not search; with "
                    "nix on another distribution, the host's driver libraries are outside the program's closure."),
        fix=("On NixOS build the package with nixpkgs' `autoAddDriverRunpath` (or `addDriverRunpath`) so it finds "
             "/run/opengl-driver/lib, or for a program run in a nix shell put /run/opengl-driver/lib in LD_LIBRARY_PATH "
             "(or use nix-ld); check `ls /run/opengl-driver/lib/libcuda.so.1` (hardware.graphics and hardware.nvidia "
             "enabled). With nix on another distribution, run it through nixGL or put the host driver's library "
             "directory (e.g. /usr/lib/x86_64-linux-gnu) in LD_LIBRARY_PATH."),
        examples=("Jan 06 21:52:42 faolin .atopgpud-wrapp[771782]: atopgpud ERROR: Shared lib 'libnvidia-ml' probably not "
                  "installed!\n/nix/store/arn1wq05k8is8j99kfflp20vvhwbvb2b-atop-2.7.1/bin/atopgpud",),
    ),
    Rule(
        # the JVM's loader for a CUDA binding's native library (JCuda, JCublas2, JCudnn, a JNI wrapper of cuBLAS/cuDNN):
        # the library, or the CUDA release's DLL/.so it links, is not where the loader looks
        name="lib.java_native_cuda_library",
        category="missing_shared_lib",
        patterns=(),
        messages=("java.unsatisfied_link",),
        # the JVM's and JCuda's wordings name any library: the one they name is a CUDA one (JCuda's JCublas2-…, a
        # cudart/cublas/cudnn/nvrtc/nvcuda/nvml/nccl/nvinfer or NVIDIA's own library), not a path listed after it, not
        # lwjgl or opencv
        requires=(r"(?:UnsatisfiedLinkError\s*:\s*(?:no\s+|Can.t\s+load\s+library\s*:\s*)?|Error\s+while\s+loading\s+"
                  r"native\s+library\s*[\"\x{201c}])"
                  r"(?:\S*[/\\])?(?:lib)?(?:jcu\w*|j?cu(?:da|blas|dnn|fft|rand|sparse|solver)\w*|nvrtc\w*|nvcuda\w*|"
                  r"nvml\w*|nccl\w*|nvinfer\w*|nvidia[\w-]*)",),
        confidence=0.8,
        root_cause=("The JVM could not load a CUDA binding's native library: it is not on "
                    "java.library.path, or a CUDA library it links (from the CUDA release it was built for) is not "
                    "installed or not on the loader's path."),
        fix=("Install the CUDA toolkit release the binding's natives were built for (JCuda's release notes name it; "
             "JCuda 0.8.0: CUDA 8.0), put its bin (Windows) or lib64 (Linux) directory on PATH / LD_LIBRARY_PATH, or "
             "use the binding's release built for the installed CUDA."),
        examples=('java.lang.UnsatisfiedLinkError: Error while loading native library "JCublas2-0.8.0-windows-x86_64"\n'
                  "java.lang.UnsatisfiedLinkError: no JCublas2-0.8.0-windows-x86_64 in java.library.path",),
    ),
    Rule(
        # macOS's loader: the binary names a dylib by an rpath or install name the loader cannot resolve (dyld 2's
        # "Reason: image not found", dyld 3/4's list of paths tried; Python's dlopen quotes it)
        name="lib.macos_dylib_not_loaded",
        category="missing_shared_lib",
        patterns=(),
        messages=("dyld.library_not_loaded",),
        confidence=0.85,
        root_cause=("macOS's loader (dyld) could not find a dynamic library the program links[ ({library})]: it is not "
                    "installed, or it is not where the binary's install name or rpath points."),
        fix=("Find the dylib (`mdfind -name <name>`, `find / -name '<name>' 2>/dev/null`) and see where the binary "
             "looks (`otool -L <binary>`, `otool -l <binary> | grep -A2 LC_RPATH`): reinstall the package that ships it "
             "(Homebrew: `brew reinstall <formula>`), add its directory to the rpath (`install_name_tool -add_rpath "
             "<dir> <binary>`) or to DYLD_LIBRARY_PATH (CUDA on macOS, 10.2 and older: /usr/local/cuda/lib)."),
        examples=("dyld: Library not loaded: @rpath/libcudart.9.0.dylib\n  Referenced from: /Users/turbo/darknet/./darknet"
                  "\n  Reason: image not found",),  # pjreddie/darknet#366
    ),
    Rule(
        # cudarc (Rust; candle's CUDA backend) dlopens CUDA's libraries by a list of file names; none loaded: the
        # library is not installed or not on the search path, or this cudarc predates the installed CUDA's file name
        name="lib.cudarc_library_not_found",
        category="missing_shared_lib",
        patterns=(),
        messages=("cudarc.lib_not_found",),
        confidence=0.82,
        root_cause=("cudarc found none of the file names it tries for the CUDA library[ ({library})]: the library is not "
                    "installed or not on the loader's path, or this cudarc release does not know the installed CUDA's "
                    "file name for it (CUDA 12.5's Windows NVRTC is nvrtc64_120_0.dll)."),
        fix=("Check the CUDA toolkit's library is there and on the path (Windows: the CUDA `bin` directory on PATH; Linux: "
             "`lib64` on LD_LIBRARY_PATH or in ld.so.conf); if it is, upgrade cudarc (or candle, which pins it) to a "
             "release whose name list includes the installed CUDA version."),
        examples=("Unable to find nvrtc lib under the names [\"nvrtc\", \"nvrtc64\", \"nvrtc64_12\", \"nvrtc64_125\"]. "
                  "Please open GitHub issue.",),  # chelsea0x3b/cudarc#246
    ),
)
