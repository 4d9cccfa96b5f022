using FASTER.core;
using PersistentServices.Log;

namespace PersistentServices.Tests.TestSupport;

internal static class LogTestOptions
{
    /// <summary>Small pages and segments, so tests cross page and segment boundaries quickly.</summary>
    public static LogOptions Small(string directory, Func<string, LogIoThread, IDevice>? device = null) => new()
    {
        Directory = directory,
        PageSizeBits = 14,
        MemorySizeBits = 16,
        SegmentSizeBits = 16,
        MaxRecordBytes = 4096,
        MetadataFlushInterval = TimeSpan.Zero,
        DeviceFactory = device,
    };

    /// <summary>The default device (what DurableLog uses) wrapped in a fault injector.</summary>
    public static Func<string, LogIoThread, IDevice> Faulty(Action<FaultInjectingDevice> capture) => (basePath, io) =>
    {
        var device = new FaultInjectingDevice(DurableLog.CreateDefaultDevice(basePath, io));
        capture(device);
        return device;
    };
}
