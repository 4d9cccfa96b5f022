using FASTER.core;

namespace PersistentServices.Log;

/// <summary>
/// FASTER's <see cref="ILogCommitManager"/> for fast-commit mode. Every commit is made durable by the commit
/// record FASTER writes into the log (one write); FASTER calls <see cref="Commit"/> once that commit is durable, after
/// releasing its waiters. This manager hands the commit to <see cref="CommitMetadataWriter"/>, which writes the new floor
/// into the metadata file (unflushed) and flushes it on its own thread, at most once per interval; and writes and flushes
/// at once, before FASTER deletes segment files, when the begin address moves. FASTER's default instead creates and
/// deletes a file per commit. At open it hands FASTER the recovery point that <see cref="LogRecoveryScanner"/> verified, so
/// FASTER's own lenient recovery never decides anything.
/// </summary>
internal sealed class ThrottledCommitManager : ILogCommitManager
{
    private readonly CommitMetadataWriter _writer;
    private readonly long _recoveryCommitNum;
    private readonly byte[]? _recoveryInfo;
    private readonly Action<Exception> _onWriteFailure;

    public ThrottledCommitManager(CommitMetadataWriter writer, LogScanResult verified, Action<Exception> onWriteFailure)
    {
        _writer = writer;
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

    public void Commit(long beginAddress, long untilAddress, byte[] commitMetadata, long commitNum, bool forceWriteMetadata)
    {
        if (!forceWriteMetadata)
        {
            _writer.Report(beginAddress, untilAddress, commitNum);
            return;
        }

        try
        {
            _writer.WriteNow(beginAddress, untilAddress, commitNum);
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
