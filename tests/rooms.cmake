# Tests by room: which tests exercise which folder or command, so that someone
# changing engine/python/ runs `ctest -L engine-python` (a regex: `-L cli`
# selects every cli-* label, `-LE system` leaves the system tests out).
# One line per test file, "NAME label...": TFPROV_UNIT_ROOMS for
# tests/unit/test_NAME.c, TFPROV_SYSTEM_ROOMS for tests/system/test_NAME.py.
# Rooms are the folders of ARCHITECTURE.md §2 (engine-base,
# state, engine-core, engine-artifact, engine-gpu, engine-image,
# engine-python, engine-kb, modules, engine-run), cli-COMMAND for a command's
# own tests, cli for the front end at large; packaging, manifests and tree
# (the repository's own rules) for the rest. Every test also carries `unit`
# or `system`. A test file missing here gets the label `unfiled`, and
# tests/system/test_layout.py fails naming it.
set(TFPROV_UNIT_ROOMS
  "cabundle engine-artifact"
  "cache_memo engine-artifact"
  "compat engine-kb"
  "cores engine-artifact"
  "digest engine-base"
  "error engine-base"
  "fs engine-base"
  "gpu_probe engine-gpu"
  "manifest engine-core"
  "minisign engine-artifact"
  "ocilayer engine-image"
  "pipcaps engine-kb"
  "redist engine-artifact"
  "stackenv engine-core"
  "state state"
  "state_store state"
  "version engine-base"
  "wheelfmt engine-python")
set(TFPROV_SYSTEM_ROOMS
  "ansible_collection packaging"
  "apply_proof engine-run engine-gpu cli-apply"
  "artifact_safety engine-artifact engine-core"
  "bench_cmd cli-bench engine-gpu"
  "bench_script engine-gpu"
  "closure_requires manifests"
  "concurrent_runs engine-artifact state"
  "conda engine-python"
  "current_stacks modules engine-python engine-artifact"
  "deb_lifecycle packaging"
  "diff cli-diff engine-run"
  "docs_drift packaging cli"
  "doctor cli-doctor engine-gpu engine-kb"
  "durability engine-core"
  "engine_apply engine-run engine-core state cli-apply"
  "engine_kill engine-core state"
  "engine_lock state"
  "engine_manifest_errors engine-core cli-validate"
  "env_repair engine-python modules engine-run"
  "failed_apply_activates_nothing engine-run modules"
  "fetch engine-artifact"
  "fleet packaging"
  "fuzz_regressions engine-artifact engine-core engine-python"
  "gpu_convprobe engine-gpu"
  "gpu_libcheck engine-gpu"
  "gpu_probe engine-gpu modules"
  "gpu_stack modules engine-gpu"
  "image engine-image cli-image"
  "image_podman engine-image cli-image"
  "init cli-init engine-kb"
  "install packaging"
  "interpreter_choice engine-python"
  "json_events cli engine-base"
  "layout tree"
  "local_urls engine-artifact"
  "lock cli-lock engine-python engine-artifact"
  "lock_check cli-lock engine-kb"
  "lock_targets cli-lock engine-python"
  "mirror cli-mirror engine-artifact"
  "ops cli engine-run"
  "parallel_decode engine-artifact"
  "pip engine-python"
  "pip_complete_lock engine-kb modules"
  "pip_spawn engine-base engine-python"
  "plan_shipped engine-run cli-plan"
  "power_loss engine-core state engine-python"
  "python_artifacts engine-python engine-artifact"
  "python_decode_ahead engine-python engine-artifact"
  "python_env engine-python modules"
  "real_cudart_stack modules engine-gpu"
  "release packaging"
  "root_confinement engine-base engine-core"
  "runfile_legacy modules engine-artifact"
  "sbom cli-sbom engine-run"
  "shipped_manifests manifests engine-kb"
  "side_files engine-core cli-validate"
  "signatures engine-artifact cli-sign"
  "size tree"
  "stack_env cli-run engine-core"
  "trust_small engine-artifact"
  "two_stacks engine-core modules"
  "unpack engine-artifact"
  "unpack_bounds engine-artifact"
  "unpack_zip_parallel engine-artifact"
  "unverified_decode engine-artifact"
  "user_surface cli"
  "validate_guide cli-validate engine-kb"
  "venv_native engine-python"
  "verify_gpu cli-verify engine-gpu"
  "version_libraries cli"
  "wheel_conformance engine-python"
  "wheel_kill engine-python engine-core"
  "wheel_native engine-python")

# tfprov_test_labels(TEST KIND NAME): the labels of test file NAME of KIND
# (unit or system).
function(tfprov_test_labels test kind name)
  string(REGEX REPLACE "^test_" "" short ${name})
  set(labels ${kind})
  set(found FALSE)
  string(TOUPPER ${kind} up)
  foreach(row ${TFPROV_${up}_ROOMS})
    string(REPLACE " " ";" row "${row}")
    list(POP_FRONT row who)
    if(who STREQUAL short)
      list(APPEND labels ${row})
      set(found TRUE)
    endif()
  endforeach()
  if(NOT found)
    list(APPEND labels unfiled)
  endif()
  set_tests_properties(${test} PROPERTIES LABELS "${labels}")
endfunction()
