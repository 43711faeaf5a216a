/* The function whose calls the test points elsewhere (got_hook_test.cpp). */
int memcost_got_target(void) { return 1; }
