/* Another library's call to memcost_got_target, through its own offset table, as an extension
   module calls PyEval_RestoreThread (got_hook_test.cpp). */
int memcost_got_target(void);
int memcost_got_call_target(void) { return memcost_got_target(); }
