/* Preloaded into the ranks of the ASan multi-rank runs (scripts/run_sanitizers.sh).
 *
 * Open MPI dlopen()s its components (mca_*.so) and dlclose()s them in MPI_Finalize, before
 * LeakSanitizer runs at exit. Their process-lifetime allocations are then reported with
 * frames in "<unknown module>", which no suppression can name, so every MPI program "leaks".
 * Keeping the libraries mapped lets LeakSanitizer symbolize those frames: lsan.supp then
 * suppresses them by library, and a leak of ours still shows with its own frames. */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
