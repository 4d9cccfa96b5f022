using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Log.CrashChild;

/// <summary>
/// The small log checked in under test/PersistentServices.Core.Tests/Fixtures/log-v1, which every later build must
/// still read (docs/log-format.md, "Version rules"). Written by <c>CrashChild write-fixture DIR</c>; the tests use
/// <see cref="Expected"/> and compare a fresh write with the checked-in bytes.
/// </summary>
internal static class FixtureLog
{
    public const string Name = "log-v1";
    private const int Records = 12;
    private const int TruncateBefore = 2;

    public static LogOptions Options(string directory) => new()
    {
        Directory = directory,
        PageSizeBits = 12,
        MemorySizeBits = 14,
        SegmentSizeBits = 14,
        MaxRecordBytes = 1024,
        MetadataFlushInterval = TimeSpan.Zero,
    };

    /// <summary>The records the fixture holds, in order, after its truncation.</summary>
    public static IReadOnlyList<(RecordKind Kind, IMessage Body)> Expected(long truncatedUntil)
    {
        var records = new List<(RecordKind, IMessage)>();
        for (var i = TruncateBefore; i < Records; i++)
        {
            records.Add((RecordKind.Payload, PayloadOf(i)));
            if (i == 5)
            {
                records.Add((RecordKind.LogTruncated, new LogTruncated { UntilLsn = truncatedUntil }));
            }
        }

        return records;
    }

    /// <summary>Writes the fixture into an empty <paramref name="directory"/>: 12 payloads in 4 commits, the first 2 truncated.</summary>
    public static async Task WriteAsync(string directory)
    {
        await using var log = await DurableLog.OpenAsync(Options(directory));
        var lsns = new List<long>();
        for (var i = 0; i < Records; i++)
        {
            lsns.Add(log.Append(RecordKind.Payload, PayloadOf(i)));
            if (i % 3 == 2)
            {
                await log.WaitUntilDurableAsync(lsns[^1]);
            }

            if (i == 5)
            {
                await log.TruncateUntilAsync(lsns[TruncateBefore]);
            }
        }

        await log.WaitUntilDurableAsync(lsns[^1]);
    }

    private static Payload PayloadOf(int i) => new()
    {
        Tag = (uint)(1000 + i),
        Data = ByteString.CopyFromUtf8(string.Concat(Enumerable.Repeat($"record {i}; ", 1 + i % 5))),
    };
}
