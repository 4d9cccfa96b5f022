using Google.Protobuf;
using PersistentServices;
using PersistentServices.Log;
using PersistentServices.Log.CrashChild;
using PersistentServices.Log.Records;

// Usage: CrashChild <directory> <writers> <pageSizeBits> <segmentSizeBits> <maxPayload>
//        CrashChild write-fixture <directory> [sealed]   (writes the checked-in old-format log, or the sealed one, FixtureLog.cs)
// Appends Payload records numbered 1, 2, ... from <writers> concurrent writers. Once a record is durable it prints
// "D <lsn> <number> <durableUntil> ." (the dot marks a whole line). Runs until killed. The kill tests parse these lines.
// With PS_CRASH_CHILD_LOG_KEY set (a 32-byte key in base64), the records are sealed with it (LogOptions.Encryption).
if (args is ["write-fixture", var fixtureDirectory, ..] && args.Length <= 3)
{
    await FixtureLog.WriteAsync(fixtureDirectory, sealedRecords: args is [_, _, "sealed"]);
    return 0;
}

if (args.Length != 5)
{
    Console.Error.WriteLine("usage: CrashChild <directory> <writers> <pageSizeBits> <segmentSizeBits> <maxPayload>");
    return 2;
}

var options = new LogOptions
{
    Directory = args[0],
    PageSizeBits = int.Parse(args[2], System.Globalization.CultureInfo.InvariantCulture),
    MemorySizeBits = int.Parse(args[2], System.Globalization.CultureInfo.InvariantCulture) + 2,
    SegmentSizeBits = int.Parse(args[3], System.Globalization.CultureInfo.InvariantCulture),
    MaxRecordBytes = 4096,
    MetadataFlushInterval = TimeSpan.FromMilliseconds(1),
};
options.Encryption.Key = Environment.GetEnvironmentVariable("PS_CRASH_CHILD_LOG_KEY"); // sealed records (LogKillTests' encrypted run)
var writers = int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture);
var maxPayload = int.Parse(args[4], System.Globalization.CultureInfo.InvariantCulture);

await using var log = await DurableLog.OpenAsync(options);
var output = Console.Out;
var outputLock = new Lock();
long counter = 0;
Console.Error.WriteLine($"ready {log.BeginAddress} {log.DurableUntil}");

var tasks = Enumerable.Range(0, writers).Select(_ => Task.Run(async () =>
{
    while (true)
    {
        var i = Interlocked.Increment(ref counter);
        var payload = new Payload { Tag = (uint)i, Data = ByteString.CopyFrom(CrashPayload.For(i, maxPayload)) };
        var lsn = log.Append(RecordKind.Payload, payload);
        await log.WaitUntilDurableAsync(lsn);
        lock (outputLock)
        {
            output.WriteLine($"D {lsn} {i} {log.DurableUntil} .");
            output.Flush();
        }
    }
})).ToArray();

await Task.WhenAll(tasks);
return 0;
