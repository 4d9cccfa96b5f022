using PersistentServices.Log.Records;

namespace PersistentServices.Log;

/// <summary>Receives the intact records a scan walks over (the verify command counts them); nothing is retained by the scanner.</summary>
internal interface ILogScanVisitor
{
    /// <summary>An intact record (envelope verified); not yet known to be committed. <paramref name="body"/> is valid only during the call.</summary>
    void Record(RecordHeader header, ReadOnlySpan<byte> body);

    /// <summary>An intact commit record: every record visited before <paramref name="until"/> is committed.</summary>
    void Committed(long until);
}
