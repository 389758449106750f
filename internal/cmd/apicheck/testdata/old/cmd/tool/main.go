// Command tool is a program: its exported names are not API.
package main

// Run is removed after the baseline, which is no incompatible change.
func Run() {}

func main() { Run() }
