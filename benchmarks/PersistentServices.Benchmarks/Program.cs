using BenchmarkDotNet.Running;

// dotnet run -c Release --project benchmarks/PersistentServices.Benchmarks -- --filter '*'
// (add --job dry for a smoke run, --job short for quick numbers; see benchmarks/README.md)
BenchmarkSwitcher.FromAssembly(typeof(PersistentServices.Benchmarks.Endpoints.EndpointBenchmarks).Assembly).Run(args);
