using PersistentServices.Log;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>
/// A promoted replica's open walks only what its hot follower has not verified (LogRecoveryScanner.VerifyFrom, then Scan
/// with the verified prefix). Verified in steps as the follower does, whatever the files hold, the open must find what a
/// walk from the begin address finds: the same committed end, counts, torn tail and problems in the same words; the
/// prefix never reaches past damage.
/// </summary>
public sealed class VerifiedPrefixTests
{
    [Theory]
    [InlineData("none", 1)]
    [InlineData("none", 3)]
    [InlineData("torn-tail", 2)]
    [InlineData("flip-early", 2)]
    [InlineData("flip-late", 1)]
    [InlineData("flip-commit-late", 3)]
    [InlineData("zeros-late", 2)]
    [InlineData("garbage-after-data", 2)]
    [InlineData("segment-missing", 2)]
    public async Task AnOpenAfterAPrefixVerifiedInSteps_FindsWhatAWalkFromTheBeginFinds(string damage, int stepPages)
    {
        using var dir = new TempDirectory();
        var (lsns, metadata, lastCommitStart, end) = await SplitWalkTests.WriteAsync(dir.Path);
        var options = LogTestOptions.Small(dir.Path);
        var metadataPath = Path.Combine(dir.Path, CommitMetadataFile.FileName);
        SplitWalkTests.ApplyDamage(dir.Path, damage, options, lsns, metadata, lastCommitStart, end);

        var (recorded, _) = CommitMetadataFile.Read(metadataPath);
        var full = LogRecoveryScanner.Scan(dir.Path, options, recorded, walkInTwo: false);

        // As the follower does: from the begin address, step by step (a step's end falls anywhere, inside entries too).
        var prefix = VerifiedPrefix.At(recorded!.Value.BeginAddress);
        var steps = 0;
        for (var until = prefix.Until + (stepPages * options.PageSize) - 100; steps < 1000; until += stepPages * options.PageSize, steps++)
        {
            prefix = LogRecoveryScanner.VerifyFrom(dir.Path, options, prefix, until, visitor: null);
            if (until > end + options.PageSize)
            {
                break;
            }
        }

        Assert.True(prefix.Until <= full.CommittedUntil, $"the prefix ({prefix.Until}) reaches past the committed end a full walk finds ({full.CommittedUntil})");
        if (full.Problems.Count > 0)
        {
            Assert.True(prefix.Until <= full.Problems.Min(p => p.Address), $"the prefix ({prefix.Until}) reaches past damage at {full.Problems.Min(p => p.Address)}");
        }

        var opened = LogRecoveryScanner.Scan(dir.Path, options, recorded, visitor: null, verified: prefix);
        Assert.Equal(prefix.Until, opened.VerifiedBefore);
        SplitWalkTests.AssertSameFindings(full, opened);
        if (damage == "none")
        {
            Assert.Equal(end, prefix.Until); // verified to the end: the open walks nothing
            Assert.Empty(opened.Problems);
        }
    }

    [Fact]
    public async Task APrefixThatDoesNotCoverTheBegin_IsNotUsed()
    {
        using var dir = new TempDirectory();
        var (lsns, _, _, end) = await SplitWalkTests.WriteAsync(dir.Path);
        var options = LogTestOptions.Small(dir.Path);
        var (recorded, _) = CommitMetadataFile.Read(Path.Combine(dir.Path, CommitMetadataFile.FileName));
        var full = LogRecoveryScanner.Scan(dir.Path, options, recorded, walkInTwo: false);

        // Begun after the begin address (what lies before it was never walked): the open walks everything.
        var late = LogRecoveryScanner.VerifyFrom(dir.Path, options, VerifiedPrefix.At(lsns[200]), end, visitor: null);
        var opened = LogRecoveryScanner.Scan(dir.Path, options, recorded, visitor: null, verified: late);
        Assert.Equal(0, opened.VerifiedBefore);
        SplitWalkTests.AssertSameFindings(full, opened);
    }
}
