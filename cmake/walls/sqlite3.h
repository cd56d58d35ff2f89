/*
 * sqlite3.h - the SQLite wall (ARCHITECTURE.md §2, "A closed store").
 *
 * Every folder but state/ has cmake/walls/ first on its include path
 * (tfprov_folder() in CMakeLists.txt), so an include of <sqlite3.h> anywhere
 * else finds this file and fails to build; tests/system/test_layout.py plants
 * one. Ask the store (state/state.h) instead.
 */
#error "only state/ speaks SQLite: call a function of state.h (ARCHITECTURE.md, a closed store)"
