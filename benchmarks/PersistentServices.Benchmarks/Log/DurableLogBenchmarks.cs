using BenchmarkDotNet.Attributes;
using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Benchmarks.Log;

/// <summary>
/// Append (in memory, not waiting for durability) and a full verified scan, on a fresh log directory per iteration.
/// Durable-commit latency and throughput are measured by the commit harness, not here.
/// </summary>
[MemoryDiagnoser]
public class DurableLogBenchmarks
{
    private const int Records = 10_000;
    private readonly Payload _record = new() { Tag = 1, Data = ByteString.CopyFrom(new byte[487]) };
    private string _root = null!;
    private DurableLog _log = null!;
    private DurableLog _scanLog = null!;

    [GlobalSetup]
    public void Setup()
    {
        _root = Path.Combine(Path.GetTempPath(), "ps-bench-" + Guid.NewGuid().ToString("N"));
        _scanLog = DurableLog.OpenAsync(new LogOptions { Directory = Path.Combine(_root, "scan") }).GetAwaiter().GetResult();
        long last = 0;
        for (var i = 0; i < Records; i++)
        {
            last = _scanLog.Append(RecordKind.Payload, _record);
        }

        _scanLog.WaitUntilDurableAsync(last).AsTask().GetAwaiter().GetResult();
    }

    [IterationSetup(Target = nameof(Append512))]
    public void OpenFreshLog() => _log = DurableLog.OpenAsync(new LogOptions { Directory = Path.Combine(_root, Guid.NewGuid().ToString("N")) }).GetAwaiter().GetResult();

    [IterationCleanup(Target = nameof(Append512))]
    public void CloseLog() => _log.DisposeAsync().AsTask().GetAwaiter().GetResult();

    [Benchmark(OperationsPerInvoke = 1000)]
    public long Append512()
    {
        long lsn = 0;
        for (var i = 0; i < 1000; i++)
        {
            lsn = _log.Append(RecordKind.Payload, _record);
        }

        return lsn;
    }

    [Benchmark(OperationsPerInvoke = Records)]
    public async Task<long> Scan10k()
    {
        long count = 0;
        await foreach (var record in _scanLog.ScanAsync(_scanLog.BeginAddress))
        {
            count += record.Header.BodyLength;
        }

        return count;
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        _scanLog.DisposeAsync().AsTask().GetAwaiter().GetResult();
        Directory.Delete(_root, recursive: true);
    }
}
