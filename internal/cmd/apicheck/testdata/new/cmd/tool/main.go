// Command tool is a program: its exported names are not API.
package main

func main() {}
