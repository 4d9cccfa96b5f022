using System.Buffers.Binary;
using PersistentServices.Log;
using PersistentServices.Replication;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Replication;

/// <summary>
/// A log directory's term file (docs/replication.md, "The term file"): the term, the role, the content term and the vote
/// survive a write and a read; a file of the first format (PST1, no vote) still reads, as recording no vote; a damaged
/// file stops the node (fail-stop), and a file of a newer format is refused as such.
/// </summary>
public sealed class TermFileTests
{
    [Fact]
    public void Write_WithAVote_ReadsBackTheSameRecord()
    {
        using var dir = new TempDirectory();
        var record = new TermRecord(7, Primary: false, ContentTerm: 5, VotedFor: Guid.Parse("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"));

        TermFile.Write(dir.Path, record);

        Assert.Equal(record, TermFile.Read(dir.Path));
        Assert.Equal(44, new FileInfo(TermFile.PathIn(dir.Path)).Length);
        Assert.Equal("PST2"u8.ToArray(), File.ReadAllBytes(TermFile.PathIn(dir.Path))[..4]);
    }

    [Fact]
    public void Write_WithoutAVote_ReadsBackNoVote()
    {
        using var dir = new TempDirectory();

        TermFile.Write(dir.Path, new TermRecord(3, Primary: true, ContentTerm: 3));

        Assert.Equal(new TermRecord(3, true, 3, Guid.Empty), TermFile.Read(dir.Path));
    }

    [Fact]
    public void Read_AFileOfTheFirstFormat_RecordsNoVote()
    {
        using var dir = new TempDirectory();
        File.WriteAllBytes(TermFile.PathIn(dir.Path), FirstFormat(term: 4, primary: true, contentTerm: 2));

        Assert.Equal(new TermRecord(4, Primary: true, ContentTerm: 2, VotedFor: Guid.Empty), TermFile.Read(dir.Path));
    }

    [Fact]
    public void Read_NoFile_IsNull()
    {
        using var dir = new TempDirectory();

        Assert.Null(TermFile.Read(dir.Path));
    }

    [Theory]
    [InlineData(4)]   // the term
    [InlineData(20)]  // the role
    [InlineData(30)]  // the vote
    [InlineData(42)]  // the CRC
    public void Read_AFlippedBit_IsCorruption(int offset)
    {
        using var dir = new TempDirectory();
        TermFile.Write(dir.Path, new TermRecord(7, false, 5, Guid.NewGuid()));
        var path = TermFile.PathIn(dir.Path);
        var content = File.ReadAllBytes(path);
        content[offset] ^= 0x10;
        File.WriteAllBytes(path, content);

        Assert.Throws<LogCorruptionException>(() => TermFile.Read(dir.Path));
    }

    [Theory]
    [InlineData(0)]
    [InlineData(27)]
    [InlineData(28)] // a PST2 file cut to the first format's size
    [InlineData(43)]
    public void Read_ATruncatedFile_IsCorruption(int length)
    {
        using var dir = new TempDirectory();
        TermFile.Write(dir.Path, new TermRecord(7, false, 5, Guid.NewGuid()));
        var path = TermFile.PathIn(dir.Path);
        File.WriteAllBytes(path, File.ReadAllBytes(path)[..length]);

        Assert.Throws<LogCorruptionException>(() => TermFile.Read(dir.Path));
    }

    [Fact]
    public void Read_AFirstFormatFileWithAFlippedBit_IsCorruption()
    {
        using var dir = new TempDirectory();
        var content = FirstFormat(term: 4, primary: false, contentTerm: 2);
        content[5] ^= 0x01;
        File.WriteAllBytes(TermFile.PathIn(dir.Path), content);

        Assert.Throws<LogCorruptionException>(() => TermFile.Read(dir.Path));
    }

    [Fact]
    public void Read_ANewerFormat_IsRefusedAsSuch()
    {
        using var dir = new TempDirectory();
        var content = new byte[60];
        "PST3"u8.CopyTo(content);
        File.WriteAllBytes(TermFile.PathIn(dir.Path), content);

        var error = Assert.Throws<LogFormatException>(() => TermFile.Read(dir.Path));
        Assert.Contains("newer", error.Message, StringComparison.Ordinal);
    }

    /// <summary>What the first format (before votes) wrote: "PST1", term, content term, role, three zero bytes, CRC-32C of the 24.</summary>
    private static byte[] FirstFormat(long term, bool primary, long contentTerm)
    {
        var content = new byte[28];
        "PST1"u8.CopyTo(content);
        BinaryPrimitives.WriteInt64LittleEndian(content.AsSpan(4), term);
        BinaryPrimitives.WriteInt64LittleEndian(content.AsSpan(12), contentTerm);
        content[20] = primary ? (byte)1 : (byte)0;
        BinaryPrimitives.WriteUInt32LittleEndian(content.AsSpan(24), Crc32C.Compute(content.AsSpan(0, 24)));
        return content;
    }
}
