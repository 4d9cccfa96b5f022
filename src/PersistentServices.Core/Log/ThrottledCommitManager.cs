using FASTER.core;

namespace PersistentServices.Log;

/// <summary>
/// FASTER's <see cref="ILogCommitManager"/> for fast-commit mode. Every commit is made durable by the commit
/// record FASTER writes into the log (one write); this manager writes the metadata in place
/// (<see cref="CommitMetadataFile"/>) only every Nth commit and whenever the begin address moves, instead of
/// FASTER's default of creating and deleting a file per commit. At open it hands FASTER the recovery point that
/// <see cref="LogRecoveryScanner"/> verified, so FASTER's own lenient recovery never decides anything.
/// </summary>
internal sealed class ThrottledCommitManager : ILogCommitManager
{
    private readonly CommitMetadataFile _file;
    private readonly int _interval;
    private readonly long _recoveryCommitNum;
    private readonly byte[]? _recoveryInfo;
    private readonly Action<Exception> _onWriteFailure;
    private int _sinceLastWrite;

    public ThrottledCommitManager(CommitMetadataFile file, int interval, LogScanResult verified, Action<Exception> onWriteFailure)
    {
        _file = file;
        _interval = interval;
        _onWriteFailure = onWriteFailure;
        _recoveryCommitNum = verified.CommitNum;
        if (!verified.IsNew)
        {
            _recoveryInfo = new FasterLogRecoveryInfo
            {
                BeginAddress = verified.BeginAddress,
                UntilAddress = verified.CommittedUntil,
                CommitNum = verified.CommitNum,
                Iterators = [],
            }.ToByteArray();
        }
    }

    /// <summary>Metadata writes so far (tests and the commit harness read this).</summary>
    public long MetadataWrites { get; private set; }

    public void Commit(long beginAddress, long untilAddress, byte[] commitMetadata, long commitNum, bool forceWriteMetadata)
    {
        if (!forceWriteMetadata && ++_sinceLastWrite < _interval)
        {
            return;
        }

        try
        {
            _file.Write(beginAddress, untilAddress, commitNum);
            _sinceLastWrite = 0;
            MetadataWrites++;
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ObjectDisposedException)
        {
            // Never throw into FASTER's commit worker; the log faults itself and refuses further work.
            _onWriteFailure(ex);
        }
    }

    public byte[]? GetCommitMetadata(long commitNum) => commitNum == _recoveryCommitNum ? _recoveryInfo : null;

    public IEnumerable<long> ListCommits() => _recoveryInfo is null ? [] : [_recoveryCommitNum];

    public void RemoveCommit(long commitNum)
    {
    }

    public void RemoveAllCommits()
    {
    }

    public void OnRecovery(long commitNum)
    {
    }

    public void Dispose()
    {
    }
}
