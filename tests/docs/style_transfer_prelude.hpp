// docs/STYLE_TRANSFER.md's code fragment includes and declares all it uses:
// nothing to add for the check (snippets mode of extract_code.cmake;
// compiled, not run).
#pragma once
