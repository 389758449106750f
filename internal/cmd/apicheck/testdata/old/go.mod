module example.com/apifixture

go 1.25
