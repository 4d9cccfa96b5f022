using PersistentServices.Log;
using PersistentServices.Replication;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Replication;

/// <summary>
/// A log directory's term history (<c>term-starts</c>; docs/replication.md, "Rejoining by cutting back"): its entries
/// survive a write and a read; a damaged file stops the node (fail-stop); a file of a newer format is refused as such.
/// </summary>
public sealed class TermHistoryTests
{
    private static readonly TermHistory Sample = TermHistory.Of(new TermStart(1, 64), new TermStart(2, 40_960), new TermStart(5, 1_048_640));

    [Fact]
    public void Write_ReadsBackTheSameEntries()
    {
        using var dir = new TempDirectory();

        Sample.Write(dir.Path);

        Assert.Equal(Sample.Starts, TermHistory.Read(dir.Path)!.Starts);
        Assert.Equal(8 + (3 * 16) + 4, new FileInfo(TermHistory.PathIn(dir.Path)).Length);
        Assert.Equal("PSH1"u8.ToArray(), File.ReadAllBytes(TermHistory.PathIn(dir.Path))[..4]);
        Assert.Empty(Directory.GetFiles(dir.Path, "*.tmp*")); // written through a temp file, renamed
    }

    [Fact]
    public void Read_NoFile_IsNull_AndAnEmptyHistoryRoundTrips()
    {
        using var dir = new TempDirectory();
        Assert.Null(TermHistory.Read(dir.Path));

        TermHistory.Empty.Write(dir.Path);

        Assert.Empty(TermHistory.Read(dir.Path)!.Starts);
    }

    [Theory]
    [InlineData(5)]   // the count
    [InlineData(9)]   // a term
    [InlineData(20)]  // an address
    [InlineData(57)]  // the CRC
    public void Read_AFlippedBit_IsCorruption(int offset)
    {
        using var dir = new TempDirectory();
        Sample.Write(dir.Path);
        var content = File.ReadAllBytes(TermHistory.PathIn(dir.Path));
        content[offset] ^= 0x10;
        File.WriteAllBytes(TermHistory.PathIn(dir.Path), content);

        Assert.Throws<LogCorruptionException>(() => TermHistory.Read(dir.Path));
    }

    [Fact]
    public void Read_ATruncatedFile_IsCorruption()
    {
        using var dir = new TempDirectory();
        Sample.Write(dir.Path);
        var content = File.ReadAllBytes(TermHistory.PathIn(dir.Path));
        File.WriteAllBytes(TermHistory.PathIn(dir.Path), content[..^16]);

        Assert.Throws<LogCorruptionException>(() => TermHistory.Read(dir.Path));
    }

    [Fact]
    public void Read_ANewerFormat_IsAFormatError()
    {
        using var dir = new TempDirectory();
        File.WriteAllBytes(TermHistory.PathIn(dir.Path), "PSH2\0\0\0\0\0\0\0\0"u8.ToArray());

        Assert.Throws<LogFormatException>(() => TermHistory.Read(dir.Path));
    }

    [Fact]
    public void SuccessorStart_IsWhereTheFirstNewerTermBegan()
    {
        Assert.Equal(40_960, Sample.SuccessorStart(1));
        Assert.Equal(1_048_640, Sample.SuccessorStart(2));
        Assert.Equal(1_048_640, Sample.SuccessorStart(4)); // terms 3 and 4 wrote nothing this log holds
        Assert.Null(Sample.SuccessorStart(5));
        Assert.Equal(64, Sample.SuccessorStart(0));
    }

    [Fact]
    public void With_AddsOnlyNewerTerms_AndKeepsTheAddressesALowerBound()
    {
        Assert.Same(Sample, Sample.With(5, 2_000_000)); // a primary restarted in its own term keeps where the term began
        Assert.Same(Sample, Sample.With(3, 2_000_000));
        Assert.Equal([new TermStart(1, 64), new TermStart(2, 40_960), new TermStart(5, 1_048_640), new TermStart(6, 2_000_000)], Sample.With(6, 2_000_000).Starts);
        Assert.Equal([new TermStart(1, 64), new TermStart(2, 30_000), new TermStart(5, 30_000), new TermStart(6, 30_000)], Sample.With(6, 30_000).Starts);
    }

    [Fact]
    public void Until_DropsTheTermsWhosePartLiesPastTheEnd()
    {
        Assert.Equal([new TermStart(1, 64), new TermStart(2, 40_960)], Sample.Until(50_000).Starts);
        Assert.Equal([new TermStart(1, 64), new TermStart(2, 40_960)], Sample.Until(40_960).Starts);
        Assert.Same(Sample, Sample.Until(2_000_000));
    }
}
