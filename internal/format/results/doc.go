// Package results owns sluice's results file: one api.ResultRecord per line,
// each line newline-terminated, appended as requests finish.
//
// Scan reads what a previous run left and tells which custom_ids are done;
// Open repairs the file (cuts a torn last line, drops rows the caller wants
// driven again) and returns a Writer; the Writer appends records with group
// commit and reports them through Options.OnDurable once they are on disk.
// A record is done only when OnDurable has named it: a crash at any moment
// loses nothing reported, and Scan then Open leave no half line and no
// duplicate behind. The design note is docs/results.md.
package results
