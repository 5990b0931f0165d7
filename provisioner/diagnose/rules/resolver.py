"""resolver_failure: pip/uv/conda found no solution."""

from __future__ import annotations

from provisioner.diagnose.model import Rule
from provisioner.diagnose.rules.common import GPU_EXTRA

RULES: tuple[Rule, ...] = (
    Rule(
        name="resolver.no_matching_distribution",
        category="resolver_failure",
        patterns=(
            r"No matching distribution found for \S+",
            r"Could not find a version that (?:satisfies|matches) the requirement",
            r"is not a supported wheel on this platform",
            r"Unable to find installation candidates for",
        ),
        confidence=0.88,
        root_cause=(
            "No wheel[ of {package}] exists for this Python/platform on the configured indexes (local +cuXXX "
            "versions only exist on the PyTorch index)."
        ),
        fix=(
            "Use a Python version the release supports and add the PyTorch index for the CUDA variant "
            "(--index-url https://download.pytorch.org/whl/cuXXX, or a named explicit index in uv)."
        ),
        examples=(
            "ERROR: Could not find a version that satisfies the requirement torch==1.9.1+cu111 (from versions: "
            "0.1.2, 0.1.2.post1)\n"
            "ERROR: No matching distribution found for torch==1.9.1+cu111",
        ),
    ),
    Rule(
        name="resolver.unsatisfiable",
        category="resolver_failure",
        patterns=(
            r"Ignored the following versions that require a different python version",
            r"ResolutionFailure",
            r"No solution found when resolving dependencies",
            r"we can conclude that [^\n]{0,200}(?:unsatisfiable|cannot be used)",
            r"ResolutionImpossible",
            r"conflicting dependencies",
            r"The conflict is caused by:",
            r"doesn't have a source distribution or wheel for the current platform",
            r"requires a different Python: [\d.]+ not in",
            r"version solving failed",
            r"SolverProblemError",
            r"PackagesNotFoundError: The following packages are not available from current channels",
            r"UnsatisfiableError",
            r"LibMambaUnsatisfiableError",
            r"Could not solve for environment specs",
            r"was found on https?://\S+, but not at the requested version",
        ),
        confidence=0.88,
        root_cause="The package resolver found no set of versions satisfying the requirements[ ({package})].",
        fix=(
            "Relax or align the pins (torch, torchvision, torchaudio from the same release and CUDA variant), "
            "check the Python version, and declare the PyTorch index as an explicit named index for torch only."
        ),
        examples=(
            "  × No solution found when resolving dependencies:\n  ╰─▶ Because there is no version of "
            "torch==2.7.0+cu126 "
            "and your project depends on torch==2.7.0+cu126, we can conclude that your project's requirements are "
            "unsatisfiable.",
        ),
    ),
    Rule(
        name="resolver.pip_conflict_warning",
        category="resolver_failure",
        patterns=(
            r"pip's dependency resolver does not currently take into account all the packages that are installed",
            r"requires torch==[\d.]+[^\n]{0,40}, but you have torch [\S]+ which is incompatible",
        ),
        confidence=0.45,
        generic=True,
        root_cause=(
            "pip installed a set of packages with conflicting requirements (e.g. torchvision built for another "
            "torch)."
        ),
        fix="Install torch, torchvision and torchaudio together from the same release and index.",
        examples=("torchvision 0.16.0 requires torch==2.1.0, but you have torch 2.3.1 which is incompatible.",),
    ),
    Rule(
        name="resolver.no_wheel_for_aarch64",
        category="resolver_failure",
        patterns=(
            r"only has wheels for the following platforms?: [^\n]*x86_64",
            r"doesn't have a source distribution or wheel for the current platform",
            r"is not a supported wheel on this platform",
        ),
        confidence=0.9,
        context=r"(?:^|[^a-z0-9])(?:aarch64|arm64|sbsa)(?:[^a-z0-9]|$)",
        demotes=("cpu_only_wheel",),
        root_cause=(
            "The pinned package[ ({package})] has no aarch64 build on the configured index (only x86_64/Windows "
            "wheels), so the resolver cannot install it on this aarch64 host."
        ),
        fix=(
            "On aarch64 take torch from the PyTorch CUDA index (cu128 and newer carry aarch64 wheels; `provisioner "
            "resolve --arch aarch64`), pin versions of the other packages that ship aarch64 wheels (or build them), "
            "and use platform markers / `tool.uv.required-environments` so x86-only pins are not chosen on aarch64."
        ),
        examples=(
            "error: Distribution `triton==3.3.0 @ registry+https://pypi.org/simple` can't be installed because it "
            "doesn't have a source distribution or wheel for the current platform\nhint: You're on Linux "
            "(`manylinux_2_39_aarch64`), but `triton` (v3.3.0) only has wheels for the following platforms: "
            "`manylinux_2_27_x86_64`, `manylinux_2_28_x86_64`",
        ),
    ),
    Rule(
        name="resolver.uv_no_compatible_version",
        category="resolver_failure",
        patterns=(r"No compatible version found for: \S+",),  # uv's DEBUG line (catalogue uv.no_compatible_version)
        confidence=0.7,
        # logged before uv backtracks: a resolution that then succeeds says "Resolved N packages"
        unless=r"^\s*(?:Resolved|Installed|Audited|Prepared) \d+ packages?\b",
        root_cause=(
            "uv found no version of the package that fits this Python, platform and index (e.g. no cp313 wheel of "
            "an older torch, or a local +cuXXX/+cpu version the index publishes for other platforms only)."
        ),
        fix=(
            "Pick a Python the release ships wheels for (`uv venv --python 3.12`) or a release that has wheels for "
            "this Python and platform, from the index of the wanted CUDA variant (`provisioner resolve` picks one)."
        ),
        examples=("DEBUG Searching for a compatible version of torch (>=2.3.0, <2.3.0+)\n"
                  "DEBUG No compatible version found for: torch",),
    ),
    Rule(
        # libsolv's problem text as conda (libmamba) and mamba print an unsolvable environment (src/problems.c)
        name="resolver.conda_constraint_conflict",
        category="resolver_failure",
        patterns=(r"^\s*(?:-|\S*\s*)?package \S+ has constraint \S+",),
        messages=("libsolv.constraint_conflict",),
        confidence=0.6,
        root_cause=("The conda/mamba environment cannot be solved: a package's constraint conflicts with another "
                    "requested or installed package."),
        fix=("Read the solver's chain of conflicts; relax or align the pinned versions (channel order, "
             "`channel_priority: strict`), or create a fresh environment with the packages named together."),
        examples=("Problem: package prompt-toolkit-3.0.10-pyha770c72_0 has constraint prompt_toolkit 3.0.10 conflicting "
                  "with prompt_toolkit-1.0.15-py27_0",),  # mamba-org/mamba#654
    ),
    Rule(
        # conda's __cuda virtual package: conda/mamba make it from the driver they detect (CONDA_OVERRIDE_CUDA
        # overrides it), pixi only from the manifest's [system-requirements] cuda; a CUDA build (jaxlib *cuda12*,
        # pytorch-cuda) that depends on it has no candidate where it is absent. resolvo (pixi/rattler) prints
        # "__cuda *, for which no candidates were found.", libsolv (conda/mamba) "nothing provides __cuda needed by"
        name="resolver.cuda_virtual_package_absent",
        category="resolver_failure",
        patterns=(r"\b__cuda\b[^\n]{0,40}, for which no candidates were found",
                  r"\bnothing provides (?:requested )?__cuda\b"),
        messages=("resolvo.no_candidates",),
        # resolvo's wording alone is any requirement without candidates: the one without candidates is __cuda
        requires=(r"\b__cuda\b[^\n]{0,40}, for which no candidates were found|\bnothing provides (?:requested )?__cuda\b",),
        confidence=0.9,
        root_cause=("The environment asks for a CUDA build, which needs conda's `__cuda` virtual package, and the "
                    "solver was given none: pixi offers it only when the manifest declares the system's CUDA; conda/"
                    "mamba offer it only when they detect an NVIDIA driver."),
        fix=("pixi: declare the CUDA the machines have, `[system-requirements] cuda = \"12\"` (packages such as "
             "cuda-nvcc do not count); conda/mamba: check that `nvidia-smi` works where the solve runs, or set "
             "`CONDA_OVERRIDE_CUDA=12.x` on a build host without a GPU."),
        examples=(
            # prefix-dev/pixi#1288
            "  ╰─▶ Cannot solve the request because of: jaxlib >=0.4.23,<0.5.0 *cuda12* cannot be installed because "
            "there are no viable options:\n      └─ jaxlib 0.4.23 would require\n         └─ __cuda *, for which no "
            "candidates were found.",
        ),
    ),
    Rule(
        # a package's own Requires-Python guard (setup.py/__init__ raising), pip's "requires a different Python"
        name="resolver.package_needs_other_python",
        category="resolver_failure",
        patterns=(
            r"\brequires? python\s*(?:version\s*)?[<>=!~]=?\s*\d+\.\d+[^\n]{0,80}?\bbut (?:your|the current|you are "
            r"using|the installed|found|got)\b[^\n]{0,40}?python[^\n]{0,20}?\d+\.\d+",
        ),
        messages=("pip.requires_different_python",),
        confidence=0.8,
        root_cause=("The package does not support this Python version: its Requires-Python (or its own start-up "
                    "check) excludes the interpreter in use."),
        fix=("Use a Python the package supports (`uv venv --python 3.11`, a conda env with python=3.11), or a "
             "maintained fork/release that supports this Python; `--ignore-requires-python` does not help when the "
             "package checks at import."),
        examples=("RuntimeError: TTS requires python >= 3.9 and < 3.12 but your Python version is 3.12.0 "
                  "(tags/v3.12.0:0fb18b0, Oct  2 2023, 13:03:39) [MSC v.1935 64 bit (AMD64)]",),
    ),
    Rule(
        # pip warns about an extra the chosen version does not define and installs the package without it (pip 20.3+);
        # uv the same ("does not have an extra named"): a GPU extra (`jax[cuda111]`, `…[gpu]`, `…[cu121]`) left out is
        # the CUDA part never installed (cloudhan/jax-windows-builder#5: jax 0.3.4 had dropped the cuda111 extra)
        name="resolver.gpu_extra_not_provided",
        category="resolver_failure",
        patterns=(),
        messages=("pip.extra_not_provided", "uv.extra_not_provided"),
        requires=(rf"does not (?:provide the extra|have an extra named)\s*[\"'`]?{GPU_EXTRA}",),
        # the CUDA build installed anyway (a backtracking pip that settled on another version, a +cu wheel itself)
        unless=r"\+cu\d{2,3}\b|\+cuda|\bnvidia-[a-z-]+-cu1\d|\bjax-cuda\d+-(?:plugin|pjrt)",
        confidence=0.8,
        root_cause=("The package was installed without its GPU part: the version chosen does not define the extra "
                    "asked for[ (`{extra}`)], so pip/uv installed the package alone (a warning, and the install "
                    "\"succeeds\")."),
        fix=("Install the GPU build the way this version ships it: pin a version that still has that extra, or name the "
             "CUDA package/wheel directly (for JAX the `jax[cudaNN]`/`jax[cudaNN-local]` extras of current releases or a "
             "jaxlib CUDA wheel from its index; for others the `-gpu`/`-cuXXX` package or the index of CUDA wheels); then "
             "check the framework sees the GPU."),
        examples=("  WARNING: jax 0.3.4 does not provide the extra 'cuda111'",
                  "warning: The package `jax==0.4.1` does not have an extra named `cuda12`"),
    ),
    Rule(
        # conda 4.8-4.9's UnsatisfiableError (conda/exceptions.py) adds a section for each chain that reaches the __cuda
        # virtual package; a section that lists only the virtual package itself (`feature:/linux-64::__cuda==10.2=0`,
        # with conda's `feature:|@/…` duplicate) names no package that constrained it: the solve failed on the conflicts
        # printed above it (KevinMusgrave/pytorch-metric-learning#97, a recipe; pyradiomics, a Python version)
        name="resolver.conda_cuda_section_without_constraint",
        category="resolver_failure",
        patterns=(r"incompatible with your system:\s*(?:-\s*feature:[^\n]*?__cuda==[\d.]+=0\s*)+Your installed version is",
                  # a paste that starts mid-sentence ("cations were found to be incompatible with your CUDA driver:")
                  r"incompatible with your CUDA driver:\s*(?:-\s*feature:[^\n]*?__cuda==[\d.]+=0\s*)+"
                  r"Your installed CUDA driver is"),
        messages=("conda.incompatible_with_cuda_driver",),
        # a package's own constraint on __cuda (`__cuda[version='>=11.8']`, libsolv's "has constraint __cuda"): the driver
        unless=r"__cuda\s*\[version=|has constraint __cuda",
        confidence=0.7,
        root_cause=("conda could not solve the environment for the conflicts it lists first (a Python version, a "
                    "channel, a package's recipe); the section about the CUDA driver lists only the driver's own __cuda "
                    "virtual package, which no package constrained: not a driver problem."),
        fix=("Read the conflicts above the CUDA section (\"Package X conflicts for\", \"Your python\"): choose a Python "
             "version the package is built for, add the channel that has it, or report a broken recipe; the driver "
             "needs no change."),
        examples=("The following specifications were found to be incompatible with your CUDA driver:\n\n"
                  "  - feature:/win-64::__cuda==8.0=0\n\nYour installed CUDA driver is: 8.0",),
    ),
)
